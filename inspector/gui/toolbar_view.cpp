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
  // Right side: the status, then Detach.
  const double age = std::chrono::duration<double>(App::Clock::now() - app.last_snapshot_at).count();
  char status[160];
  std::snprintf(status, sizeof status, "frame %.1f ms (ImGui %.1f) | snapshot %.0f ms old, read in %.1f ms | history %s",
                ui.frame_ms, ui.build_ms, age * 1000, app.last_take_ms, format_bytes(app.history.memory_bytes()).c_str());
  const float status_w = ImGui::CalcTextSize(status).x;
  ImGui::SameLine(std::max(ImGui::GetCursorPosX() + 20, ImGui::GetWindowWidth() - status_w - 90));
  ImGui::TextDisabled("%s", status);
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
