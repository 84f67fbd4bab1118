// inspector/gui/toolbar_view.cpp: the bar across the top: what is watched,
// pause / resume, the time scrubber over the history, and the status line.
#include <imgui.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdio>

#include "inspector/gui/views.h"

namespace fwi {

void draw_toolbar(App& app, UiState& ui, Rect r) {
  if (!begin_fixed("##toolbar", r, ImGuiWindowFlags_NoTitleBar | ImGuiWindowFlags_NoScrollbar)) {
    ImGui::End();
    return;
  }
  ImGui::TextColored(ImVec4(0.95f, 0.75f, 0.3f, 1), "freeway-inspect");
  ImGui::SameLine();
  ImGui::TextUnformatted(app.label.c_str());
  if (app.current) {
    ImGui::SameLine();
    ImGui::TextDisabled("format %u.%u, %u Hz", app.current->version_major, app.current->version_minor, app.hz);
  }
  ImGui::SameLine();
  if (app.kind == SourceKind::live && app.exited)
    ImGui::TextColored(ImVec4(0.95f, 0.4f, 0.35f, 1), "EXITED");
  else if (app.paused)
    ImGui::TextColored(ImVec4(0.95f, 0.75f, 0.3f, 1), "PAUSED");
  else
    ImGui::TextColored(ImVec4(0.45f, 0.85f, 0.5f, 1), app.kind == SourceKind::replay ? "PLAYING" : "LIVE");
  // Right side: the status, then Detach. Where the window is too narrow for
  // all of it, the history's size goes first, then the read time.
  const float after_state = ImGui::GetItemRectMax().x - ImGui::GetWindowPos().x + 20;
  const double age = std::chrono::duration<double>(App::Clock::now() - app.last_snapshot_at).count();
  char age_text[32];
  if (age < 1)
    std::snprintf(age_text, sizeof age_text, "%.0f ms", age * 1000);
  else
    std::snprintf(age_text, sizeof age_text, "%.1f s", age);
  char status[3][160];
  std::snprintf(status[0], sizeof status[0], "frame %.1f ms (ImGui %.1f) | snapshot %s old, read in %.1f ms | history %s",
                ui.frame_ms, ui.build_ms, age_text, app.last_take_ms, format_bytes(app.history.memory_bytes()).c_str());
  std::snprintf(status[1], sizeof status[1], "frame %.1f ms (ImGui %.1f) | snapshot %s old, read in %.1f ms", ui.frame_ms,
                ui.build_ms, age_text, app.last_take_ms);
  std::snprintf(status[2], sizeof status[2], "frame %.1f ms | snapshot %s old", ui.frame_ms, age_text);
  const float right = ImGui::GetWindowWidth() - 90;
  int pick = 0;
  while (pick < 3 && after_state + ImGui::CalcTextSize(status[pick]).x > right) pick++;
  if (pick < 3) {  // else none fits beside a long label: the window is too narrow
    ImGui::SameLine(right - ImGui::CalcTextSize(status[pick]).x);
    ImGui::TextDisabled("%s", status[pick]);
  }
  ImGui::SameLine(ImGui::GetWindowWidth() - 70);
  if (ImGui::Button("Detach")) ui.want_detach = true;

  // Second line: pause and scrub.
  if (ImGui::Button(app.paused ? "Resume (space)" : "Pause (space)", ImVec2(130, 0)) ||
      (ImGui::IsKeyPressed(ImGui::GetKeyIndex(ImGuiKey_Space)) && !ImGui::GetIO().WantTextInput))
    app.set_paused(!app.paused);
  ImGui::SameLine();
  const size_t n = app.history.size();
  int cursor = int(app.cursor);
  ImGui::SetNextItemWidth(ImGui::GetContentRegionAvail().x - 70);
  const double t = n ? app.history.at(std::min(app.cursor, n - 1)).time_s : 0.0;
  char fmt[64];
  std::snprintf(fmt, sizeof fmt, "%.2f s", t);
  if (ImGui::SliderInt("##scrub", &cursor, 0, n ? int(n) - 1 : 0, fmt)) {
    if (!app.paused && app.kind == SourceKind::live) app.set_paused(true);
    app.set_cursor(size_t(cursor));
  }
  if (ImGui::IsItemHovered())
    ImGui::SetTooltip("Scrub through the history (%zu samples, %s in memory).\n"
                      "Paused on a live process, the span map shows the snapshot kept nearest the cursor.",
                      n, format_bytes(app.history.memory_bytes()).c_str());
  ImGui::SameLine();
  if (ImGui::ArrowButton("##back", ImGuiDir_Left) && app.cursor > 0) {
    app.set_paused(true);
    app.set_cursor(app.cursor - 1);
  }
  ImGui::SameLine();
  if (ImGui::ArrowButton("##fwd", ImGuiDir_Right)) {
    app.set_paused(true);
    app.set_cursor(app.cursor + 1);
  }
  if (!app.error.empty()) ImGui::TextColored(ImVec4(0.95f, 0.4f, 0.35f, 1), "%s", app.error.c_str());
  if (!app.violations.empty()) {
    ImGui::SameLine();
    ImGui::TextColored(ImVec4(0.95f, 0.4f, 0.35f, 1), "span equations: %zu violation%s (first: %s)",
                       app.violations.size(), app.violations.size() == 1 ? "" : "s", app.violations[0].c_str());
  }
  ImGui::End();
}

}  // namespace fwi
