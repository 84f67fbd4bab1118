// inspector/gui/picker_view.cpp: the process picker: every process that
// publishes telemetry (stale segments pruned), refreshed once a second.
#include <imgui.h>

#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <vector>

#include "inspector/gui/views.h"

namespace fwi {

void draw_picker(App& app, UiState& ui, Rect r) {
  static std::vector<ProcessEntry> procs;
  static std::chrono::steady_clock::time_point next{};
  const auto now = std::chrono::steady_clock::now();
  if (now >= next) {
    procs = list_processes(true);
    next = now + std::chrono::seconds(1);
  }
  if (!begin_fixed("Processes", r)) {
    ImGui::End();
    return;
  }
  ImGui::TextUnformatted("Processes publishing freeway telemetry");
  ImGui::TextDisabled("Start one with FREEWAY_TELEMETRY=1 LD_PRELOAD=libfreeway.so PROGRAM, or call fw_telemetry_start().");
  if (!app.error.empty()) {  // the last attach that failed (the process exited, another user's, no telemetry)
    ImGui::PushStyleColor(ImGuiCol_Text, IM_COL32(240, 110, 100, 255));
    ImGui::TextWrapped("%s", app.error.c_str());
    ImGui::PopStyleColor();
  }
  ImGui::Spacing();
  if (procs.empty()) {
    ImGui::TextDisabled("none yet: this list refreshes every second");
  } else if (ImGui::BeginTable("procs", 4, ImGuiTableFlags_RowBg | ImGuiTableFlags_BordersInnerV |
                                            ImGuiTableFlags_SizingStretchProp)) {
    ImGui::TableSetupColumn("pid", 0, 0.5f);
    ImGui::TableSetupColumn("program", 0, 3.0f);
    ImGui::TableSetupColumn("live", 0, 0.8f);
    ImGui::TableSetupColumn("committed", 0, 0.8f);
    ImGui::TableHeadersRow();
    for (const ProcessEntry& p : procs) {
      ImGui::TableNextRow();
      ImGui::TableNextColumn();
      char id[32];
      std::snprintf(id, sizeof id, "%" PRIu64, p.pid);
      if (ImGui::Selectable(id, false, ImGuiSelectableFlags_SpanAllColumns)) {
        ui.want_attach = true;
        ui.picked_pid = p.pid;
      }
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(p.exe.c_str());
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(format_bytes(p.live_bytes).c_str());
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(format_bytes(p.committed_bytes).c_str());
    }
    ImGui::EndTable();
    ImGui::TextDisabled("click a row to attach");
  }
  ImGui::End();
}

}  // namespace fwi
