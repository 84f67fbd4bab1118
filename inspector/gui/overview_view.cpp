// inspector/gui/overview_view.cpp: the "Heap" window: headline figures, where
// the committed bytes that are not live go, and plots over the history.
#include <imgui.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "inspector/gui/palette.h"
#include "inspector/gui/views.h"

namespace fwi {

namespace {

void figure(const char* name, const std::string& value, const char* hint, float scale) {
  ImGui::BeginGroup();
  ImGui::TextDisabled("%s", name);
  ImGui::SetWindowFontScale(scale);
  ImGui::TextUnformatted(value.c_str());
  ImGui::SetWindowFontScale(1.0f);
  ImGui::EndGroup();
  if (ImGui::IsItemHovered()) ImGui::SetTooltip("%s", hint);
}

// A stacked bar of committed bytes: live, then each kind of not-live.
void committed_bar(const Figures& f) {
  struct Part {
    const char* name;
    uint64_t bytes;
    Rgb colour;
  } parts[] = {{"live", f.live, kLiveColour},
               {"free in spans", f.frag_free_in_spans, kFreeInSpansColour},
               {"pooled spans", f.frag_pooled, kPooledColour},
               {"large slack", f.frag_large_slack, kLargeSlackColour},
               {"metadata", f.metadata, kMetadataColour}};
  uint64_t total = 0;
  for (const Part& p : parts) total += p.bytes;
  const ImVec2 o = ImGui::GetCursorScreenPos();
  const float w = ImGui::GetContentRegionAvail().x, h = 16;
  ImGui::InvisibleButton("committed_bar", ImVec2(w, h));
  ImDrawList* dl = ImGui::GetWindowDrawList();
  dl->AddRectFilled(o, ImVec2(o.x + w, o.y + h), IM_COL32(30, 32, 38, 255), 2.0f);
  float x = o.x;
  for (const Part& p : parts) {
    if (total == 0 || p.bytes == 0) continue;
    float pw = w * float(double(p.bytes) / double(total));
    dl->AddRectFilled(ImVec2(x, o.y), ImVec2(x + pw, o.y + h), rgba(p.colour));
    x += pw;
  }
  if (ImGui::IsItemHovered()) {
    ImGui::BeginTooltip();
    ImGui::TextUnformatted("Where committed (plus metadata) bytes go:");
    for (const Part& p : parts)
      ImGui::TextColored(ImGui::ColorConvertU32ToFloat4(rgba(p.colour)), "%-14s %10s  %5.1f%%", p.name,
                         format_bytes(p.bytes).c_str(), total ? 100.0 * double(p.bytes) / double(total) : 0.0);
    ImGui::EndTooltip();
  }
  // Legend on one line.
  for (const Part& p : parts) {
    ImGui::ColorButton(p.name, ImGui::ColorConvertU32ToFloat4(rgba(p.colour)),
                       ImGuiColorEditFlags_NoTooltip | ImGuiColorEditFlags_NoBorder, ImVec2(10, 10));
    ImGui::SameLine(0, 4);
    ImGui::Text("%s %s", p.name, format_bytes(p.bytes).c_str());
    ImGui::SameLine(0, 14);
  }
  ImGui::NewLine();
}

}  // namespace

void draw_overview(App& app, UiState&, Rect r) {
  if (!begin_fixed("Heap", r)) {
    ImGui::End();
    return;
  }
  const Figures& f = app.figures;
  char buf[64];
  // Six figures in a row, in a larger font where they fit; else smaller, and
  // in two rows of three when even the normal font would not fit.
  const float avail_w = ImGui::GetContentRegionAvail().x;
  const float widest = ImGui::CalcTextSize("1023 MiB").x + 12;
  const int per_row = avail_w / 6.0f >= widest ? 6 : 3;
  const float col = avail_w / float(per_row);
  const float scale = std::clamp(col / widest, 1.0f, 1.35f);
  std::string values[6] = {format_bytes(f.live), format_bytes(f.committed), format_bytes(f.rss),
                           format_bytes(f.reserved), "", ""};
  std::snprintf(buf, sizeof buf, "%.2f", f.blowup);
  values[4] = buf;
  std::snprintf(buf, sizeof buf, "%.2f", f.blowup_peak);
  values[5] = buf;
  static const char* const kNames[6] = {"live", "committed", "RSS", "reserved", "blowup", "blowup (peak)"};
  static const char* const kHints[6] = {
      "Bytes in blocks handed out and not freed (block sizes)",
      "Bytes committed from the OS and not given back",
      "Resident set of the whole process (/proc/self/statm)",
      "Address space reserved from the OS",
      "committed / live: memory held now over memory in use now",
      "committed / peak live (Hoard's definition)"};
  for (int i = 0; i < 6; i++) {
    if (i % per_row) ImGui::SameLine(col * float(i % per_row));
    figure(kNames[i], values[i], kHints[i], scale);
  }
  ImGui::Spacing();
  committed_bar(f);
  ImGui::Spacing();

  const size_t n = app.history.size();
  std::vector<float> live(n), committed(n), rss(n), blowup(n);
  for (size_t i = 0; i < n; i++) {
    const Sample& s = app.history.at(i);
    live[i] = float(s.live);
    committed[i] = float(s.committed);
    rss[i] = float(s.rss);
    blowup[i] = float(s.blowup);
  }
  const int cursor = app.paused || app.kind == SourceKind::replay ? int(app.cursor) : -1;
  const float avail = ImGui::GetContentRegionAvail().y;
  const float bytes_h = std::max(80.0f, avail * 0.62f), blowup_h = std::max(60.0f, avail - bytes_h - 8);
  Series bytes[] = {{"live", rgba(kLiveColour), live.data()},
                    {"committed", rgba(kCommittedColour), committed.data()},
                    {"RSS", rgba(kRssColour), rss.data()}};
  plot_lines("bytes", bytes, 3, int(n), bytes_h, cursor, format_bytes_axis);
  Series ratio[] = {{"blowup (committed / live)", rgba(kBlowupColour), blowup.data()}};
  plot_lines("blowup", ratio, 1, int(n), blowup_h, cursor, format_ratio_axis);
  ImGui::End();
}

}  // namespace fwi
