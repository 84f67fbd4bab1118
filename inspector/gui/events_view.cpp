// inspector/gui/events_view.cpp: the "Events" window: the rare events of the
// ring (regions, commits, threads, bad frees, out of memory), newest last.
#include <imgui.h>

#include <cinttypes>
#include <cstring>

#include "inspector/gui/views.h"

namespace fwi {

namespace {
ImVec4 colour_of(const std::string& line) {
  if (line.find("bad free") != std::string::npos || line.find("out of memory") != std::string::npos)
    return ImVec4(0.95f, 0.4f, 0.35f, 1);
  if (line.find("thread") != std::string::npos) return ImVec4(0.55f, 0.75f, 0.95f, 1);
  if (line.find("region") != std::string::npos) return ImVec4(0.8f, 0.6f, 0.95f, 1);
  if (line.find("decommit") != std::string::npos) return ImVec4(0.6f, 0.62f, 0.68f, 1);
  return ImVec4(0.85f, 0.86f, 0.88f, 1);
}
}  // namespace

void draw_events(App& app, UiState& ui, Rect r) {
  if (!begin_fixed("Events", r)) {
    ImGui::End();
    return;
  }
  ImGui::Text("%zu events", app.events.size());
  ImGui::SameLine();
  ImGui::TextDisabled("missed %" PRIu64 ", dropped %" PRIu64, app.figures.events_missed, app.figures.events_dropped);
  if (ImGui::IsItemHovered())
    ImGui::SetTooltip("missed: overwritten in the ring before the inspector read them\n"
                      "dropped: the allocator could not record them (slot busy)");
  ImGui::SameLine();
  ImGui::Checkbox("follow", &ui.follow_events);
  ImGui::BeginChild("log", ImVec2(0, 0), true);
  ImGuiListClipper clipper;
  clipper.Begin(int(app.events.size()));
  while (clipper.Step())
    for (int i = clipper.DisplayStart; i < clipper.DisplayEnd; i++) {
      const std::string& line = app.events[size_t(i)];
      ImGui::TextColored(colour_of(line), "%s", line.c_str());
    }
  clipper.End();
  if (ui.follow_events && ImGui::GetScrollY() < ImGui::GetScrollMaxY()) ImGui::SetScrollHereY(1.0f);
  ImGui::EndChild();
  ImGui::End();
}

}  // namespace fwi
