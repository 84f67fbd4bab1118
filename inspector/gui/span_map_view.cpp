// inspector/gui/span_map_view.cpp: one cell per virtual span, coloured by
// state and shaded by occupancy; hover shows the descriptor, click selects.
//
// Drawn with the window's draw list, only the rows in view (ImGuiListClipper),
// so the cost per frame is the visible cells, not the span count: a million
// spans scroll as smoothly as a thousand.
#include <imgui.h>

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>

#include "inspector/gui/palette.h"
#include "inspector/gui/views.h"

namespace fwi {

namespace {

const char* kind_name(uint32_t k) { return k == FWT_REGION_ARENA ? "arena" : k == FWT_REGION_HUGE ? "huge" : "unused"; }

// The colour of span i of snapshot s.
uint32_t cell_colour(const Snapshot& s, size_t i, uint32_t region, uint32_t v) {
  const fwt_span& sp = s.spans[i];
  const fwt_region& rg = s.regions[region];
  if (rg.kind == FWT_REGION_HUGE && v > 0) {
    // A huge block spans its region from vspan 0: paint what it covers.
    const fwt_span& head = s.spans[size_t(region) * s.vspans_per_region];
    uint64_t covered = (head.large_size + (uint64_t(1) << s.vspan_shift) - 1) >> s.vspan_shift;
    if (v < covered) return rgba(shade(kStateColour[FWT_SPAN_HUGE], 0.6));
  }
  Rgb c = kStateColour[sp.state < FWT_SPAN_STATE_COUNT ? unsigned(sp.state) : unsigned(FWT_SPAN_UNUSED)];
  switch (sp.state) {
    case FWT_SPAN_HOT:
    case FWT_SPAN_FULL:
    case FWT_SPAN_PARTIAL: {
      double used = sp.capacity ? double(span_blocks_in_use(sp)) / sp.capacity : 0;
      c = shade(c, used);
      break;
    }
    case FWT_SPAN_FREE:
      if (sp.committed == 0) c = shade(c, 0.0);  // decommitted: address space only
      break;
    default:
      break;
  }
  return rgba(c);
}

void tooltip(const Snapshot& s, size_t i) {
  const fwt_span& sp = s.spans[i];
  const uint32_t region = uint32_t(i / s.vspans_per_region), v = uint32_t(i % s.vspans_per_region);
  const fwt_region& rg = s.regions[region];
  ImGui::BeginTooltip();
  ImGui::Text("span %zu  (region %u, vspan %u)", i, region, v);
  ImGui::Text("address 0x%" PRIx64, rg.base + (uint64_t(v) << s.vspan_shift));
  ImGui::Separator();
  ImGui::TextColored(ImGui::ColorConvertU32ToFloat4(rgba(kStateColour[sp.state % FWT_SPAN_STATE_COUNT])), "%s",
                     state_name(sp.state));
  if (sp.flags & FWT_SPAN_UNSTABLE) ImGui::TextDisabled("(changing while read: fields may mix two moments)");
  switch (sp.state) {
    case FWT_SPAN_HOT:
    case FWT_SPAN_FULL:
    case FWT_SPAN_PARTIAL: {
      const uint32_t bs = sp.cls < s.classes.size() ? s.classes[sp.cls].block_size : 0;
      const uint32_t used = uint32_t(span_blocks_in_use(sp));
      ImGui::Text("class %u, %u-byte blocks", unsigned(sp.cls), bs);
      ImGui::Text("in use %u of %u blocks (%.0f%%)", used, sp.capacity, sp.capacity ? 100.0 * used / sp.capacity : 0.0);
      ImGui::Text("carved %u, on its free list %u", sp.carved, sp.remote_count);
      if (sp.own_free) ImGui::Text("on its owner's list %u (a kept span)", sp.own_free);
      if (sp.owner) ImGui::Text("owner: thread cache %u", sp.owner - 1);
      if (sp.state == FWT_SPAN_HOT)
        ImGui::TextDisabled("(if it is its class's hot span, its cache's private\n free list is not published: in-use is an upper bound)");
      break;
    }
    case FWT_SPAN_LARGE:
    case FWT_SPAN_HUGE:
      ImGui::Text("block of %s, run of %u spans", format_bytes(sp.large_size).c_str(), sp.run_len);
      break;
    case FWT_SPAN_LARGE_TAIL:
      ImGui::Text("part of the run headed by span %u", sp.run_len);
      break;
    default:
      break;
  }
  ImGui::Text("committed %s", format_bytes(sp.committed).c_str());
  if (sp.flags & FWT_SPAN_LINKED) ImGui::TextDisabled("on a reusable stack");
  if (sp.flags & FWT_SPAN_GUARD) ImGui::TextDisabled("guard page");
  ImGui::Text("region %u: %s, %s at 0x%" PRIx64, region, kind_name(rg.kind), format_bytes(rg.size).c_str(), rg.base);
  ImGui::EndTooltip();
}

}  // namespace

void draw_span_map(App& app, UiState& ui, Rect r) {
  char title[96];
  std::snprintf(title, sizeof title, "Span map###spanmap");
  if (!begin_fixed(title, r)) {
    ImGui::End();
    return;
  }
  if (!app.current) {
    ImGui::TextDisabled("no snapshot");
    ImGui::End();
    return;
  }
  const Snapshot& s = *app.current;
  const Figures& f = app.figures;
  // Legend: colour, state, count.
  for (unsigned st = 0; st < FWT_SPAN_STATE_COUNT; st++) {
    ImGui::ColorButton(state_name(st), ImGui::ColorConvertU32ToFloat4(rgba(kStateColour[st])),
                       ImGuiColorEditFlags_NoTooltip | ImGuiColorEditFlags_NoBorder, ImVec2(11, 11));
    ImGui::SameLine(0, 4);
    ImGui::Text("%s %" PRIu64, state_name(st), f.spans_by_state[st]);
    ImGui::SameLine(0, 12);
  }
  ImGui::NewLine();
  ImGui::TextDisabled("%zu spans in %zu region%s; darker = emptier", s.spans.size(), s.regions.size(),
                      s.regions.size() == 1 ? "" : "s");
  ImGui::SameLine();
  ImGui::SetNextItemWidth(110);
  ImGui::SliderFloat("cell size", &ui.cell, 0.0f, 24.0f, ui.cell < 3 ? "fit" : "%.0f px");
  if (ImGui::IsItemHovered()) ImGui::SetTooltip("0: fit the whole map in the window (at least 3 px a cell)");

  const size_t V = s.vspans_per_region;
  if (V == 0 || s.spans.empty()) {
    ImGui::TextDisabled("no region reserved yet");
    ImGui::End();
    return;
  }
  // The area left in the window, less the scrollbar, decides the fit.
  const float gutter = 34.0f;
  const ImVec2 area = ImGui::GetContentRegionAvail();
  // At least one cell: a minimized or very narrow window gives negative sizes.
  const float width = std::max(area.x - gutter - ImGui::GetStyle().ScrollbarSize, 24.0f), height = std::max(area.y, 24.0f);
  ImGui::BeginChild("cells", ImVec2(0, 0), false, ImGuiWindowFlags_AlwaysVerticalScrollbar);
  ImGui::PushStyleVar(ImGuiStyleVar_ItemSpacing, ImVec2(0, 0));  // rows exactly `cell` apart
  float cell = ui.cell;
  if (cell < 3) {  // fit: the largest cell (up to 24 px) that shows every span
    cell = 24;
    while (cell > 3) {
      const size_t c = std::clamp<size_t>(size_t(width / cell), 1, V);
      const double rows_needed = double(s.regions.size()) * double((V + c - 1) / c);
      if (rows_needed * cell <= height) break;
      cell -= 1;
    }
  }
  const float pad = cell >= 6 ? 1.0f : 0.0f;
  // Each region starts a new row; a row holds as many spans as fit.
  const size_t cols = std::clamp<size_t>(size_t(width / cell), 1, V);
  const size_t rows_per_region = (V + cols - 1) / cols;
  const size_t rows = s.regions.size() * rows_per_region;
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const ImVec2 mouse = ImGui::GetIO().MousePos;
  int64_t hovered = -1;
  ImGuiListClipper clipper;
  clipper.Begin(int(rows), cell);
  while (clipper.Step()) {
    for (int row = clipper.DisplayStart; row < clipper.DisplayEnd; row++) {
      const ImVec2 o = ImGui::GetCursorScreenPos();
      const uint32_t region = uint32_t(size_t(row) / rows_per_region);
      const size_t row_in_region = size_t(row) % rows_per_region;
      if (row_in_region == 0) {
        // Labels need a text line of height: with thin regions, every few.
        const float region_h = float(rows_per_region) * cell, text_h = ImGui::GetTextLineHeight();
        const uint32_t every = region_h >= text_h ? 1 : uint32_t(std::ceil(text_h / region_h));
        char label[16];
        std::snprintf(label, sizeof label, "r%u", region);
        if (region % every == 0) dl->AddText(ImVec2(o.x, o.y - 2), IM_COL32(150, 154, 162, 255), label);
        if (region > 0)
          dl->AddLine(ImVec2(o.x + gutter, o.y), ImVec2(o.x + gutter + float(cols) * cell, o.y),
                      IM_COL32(120, 124, 132, 255));
      }
      for (size_t c = 0; c < cols; c++) {
        const size_t v = row_in_region * cols + c;
        if (v >= V) break;
        const size_t i = size_t(region) * V + v;
        const ImVec2 a(o.x + gutter + float(c) * cell, o.y), b(a.x + cell - pad, a.y + cell - pad);
        dl->AddRectFilled(a, b, cell_colour(s, i, region, uint32_t(v)));
        if (int64_t(i) == ui.selected_span) dl->AddRect(a, ImVec2(b.x + pad, b.y + pad), IM_COL32_WHITE, 0, 0, 2.0f);
        if (mouse.x >= a.x && mouse.x < a.x + cell && mouse.y >= a.y && mouse.y < a.y + cell) hovered = int64_t(i);
      }
      ImGui::Dummy(ImVec2(gutter + float(cols) * cell, cell));
    }
  }
  clipper.End();
  if (hovered >= 0 && ImGui::IsWindowHovered()) {
    tooltip(s, size_t(hovered));
    if (ImGui::IsMouseClicked(ImGuiMouseButton_Left)) ui.selected_span = hovered == ui.selected_span ? -1 : hovered;
  }
  ImGui::PopStyleVar();
  ImGui::EndChild();
  ImGui::End();
}

}  // namespace fwi
