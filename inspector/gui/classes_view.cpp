// inspector/gui/classes_view.cpp: the "Size classes" window: one row per
// class in use (sortable), a fullness bar, and a heatmap of how full each
// class's spans are (ClassFigures::occupancy, ten buckets).
#include <imgui.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <vector>

#include "inspector/gui/palette.h"
#include "inspector/gui/views.h"

namespace fwi {

namespace {

enum Column { kClass, kSize, kLiveBlocks, kLive, kHot, kFull, kPartial, kFullness, kCommitted, kColumns };

double key(const ClassFigures& c, int column) {
  switch (column) {
    case kClass: return c.cls;
    case kSize: return c.block_size;
    case kLiveBlocks: return double(c.live_blocks);
    case kLive: return double(c.live_bytes);
    case kHot: return double(c.spans_hot);
    case kFull: return double(c.spans_full);
    case kPartial: return double(c.spans_partial);
    case kFullness: return c.fullness;
    case kCommitted: return double(c.committed_bytes);
  }
  return 0;
}

void fullness_bar(double fullness) {
  const ImVec2 o = ImGui::GetCursorScreenPos();
  const float w = ImGui::GetContentRegionAvail().x, h = ImGui::GetTextLineHeight();
  ImDrawList* dl = ImGui::GetWindowDrawList();
  dl->AddRectFilled(o, ImVec2(o.x + w, o.y + h), IM_COL32(34, 36, 42, 255), 2.0f);
  dl->AddRectFilled(o, ImVec2(o.x + w * float(std::clamp(fullness, 0.0, 1.0)), o.y + h), rgba(kFullnessColour), 2.0f);
  char buf[16];
  std::snprintf(buf, sizeof buf, "%.0f%%", 100 * fullness);
  dl->AddText(ImVec2(o.x + 4, o.y), IM_COL32(240, 240, 240, 255), buf);
  ImGui::Dummy(ImVec2(w, h));
}

void heatmap(const std::vector<ClassFigures>& classes) {
  ImGui::TextDisabled("Span occupancy per class: spans whose blocks are 0-10%% ... 90-100%% in use");
  const float cell_w = std::max(14.0f, (ImGui::GetContentRegionAvail().x - 60) / float(kOccupancyBuckets));
  const float cell_h = 12.0f;
  ImDrawList* dl = ImGui::GetWindowDrawList();
  ImGuiListClipper clipper;
  // A row is its cell plus the item spacing after each Dummy: the clipper must
  // know the whole step, or the scroll area is short and the last rows unreachable.
  clipper.Begin(int(classes.size()), cell_h + ImGui::GetStyle().ItemSpacing.y);
  while (clipper.Step()) {
    for (int row = clipper.DisplayStart; row < clipper.DisplayEnd; row++) {
      const ClassFigures& c = classes[size_t(row)];
      const ImVec2 o = ImGui::GetCursorScreenPos();
      char label[24];
      std::snprintf(label, sizeof label, "%u B", c.block_size);
      dl->AddText(ImVec2(o.x, o.y - 1), IM_COL32(160, 164, 172, 255), label);
      uint32_t most = 1;
      for (uint32_t n : c.occupancy) most = std::max(most, n);
      for (unsigned b = 0; b < kOccupancyBuckets; b++) {
        const ImVec2 a(o.x + 60 + float(b) * cell_w, o.y), z(a.x + cell_w - 1, a.y + cell_h - 1);
        const double k = double(c.occupancy[b]) / most;
        const Rgb hot = shade(kHeatColour, 0.3 + 0.7 * k);
        dl->AddRectFilled(a, z, c.occupancy[b] ? rgba(hot, uint8_t(60 + 195 * k)) : IM_COL32(30, 32, 38, 255));
        if (ImGui::IsMouseHoveringRect(a, z))
          ImGui::SetTooltip("%u-byte blocks: %u span%s %u-%u%% in use", c.block_size, c.occupancy[b],
                            c.occupancy[b] == 1 ? "" : "s", b * 10, b * 10 + 10);
      }
      ImGui::Dummy(ImVec2(60 + cell_w * kOccupancyBuckets, cell_h));
    }
  }
  clipper.End();
}

}  // namespace

void draw_classes(App& app, UiState&, Rect r) {
  if (!begin_fixed("Size classes", r)) {
    ImGui::End();
    return;
  }
  std::vector<ClassFigures> classes = app.figures.classes;
  const float table_h = ImGui::GetContentRegionAvail().y * 0.62f;
  const ImGuiTableFlags flags = ImGuiTableFlags_Sortable | ImGuiTableFlags_RowBg | ImGuiTableFlags_ScrollY |
                                ImGuiTableFlags_BordersInnerV | ImGuiTableFlags_SizingStretchProp;
  if (ImGui::BeginTable("classes", kColumns, flags, ImVec2(0, table_h))) {
    ImGui::TableSetupScrollFreeze(0, 1);
    ImGui::TableSetupColumn("class", ImGuiTableColumnFlags_DefaultSort, 0.5f);
    ImGui::TableSetupColumn("size", 0, 0.7f);
    ImGui::TableSetupColumn("live blocks", 0, 0.9f);
    ImGui::TableSetupColumn("live", 0, 0.9f);
    ImGui::TableSetupColumn("hot", 0, 0.45f);
    ImGui::TableSetupColumn("full", 0, 0.45f);
    ImGui::TableSetupColumn("partial", 0, 0.55f);
    ImGui::TableSetupColumn("fullness", 0, 1.1f);
    ImGui::TableSetupColumn("committed", 0, 0.9f);
    ImGui::TableHeadersRow();
    if (ImGuiTableSortSpecs* sort = ImGui::TableGetSortSpecs(); sort && sort->SpecsCount > 0) {
      const int col = sort->Specs[0].ColumnIndex;
      const bool asc = sort->Specs[0].SortDirection == ImGuiSortDirection_Ascending;
      std::stable_sort(classes.begin(), classes.end(), [col, asc](const ClassFigures& a, const ClassFigures& b) {
        return asc ? key(a, col) < key(b, col) : key(a, col) > key(b, col);
      });
    }
    for (const ClassFigures& c : classes) {
      ImGui::TableNextRow();
      ImGui::TableNextColumn();
      ImGui::Text("%u", c.cls);
      ImGui::TableNextColumn();
      ImGui::Text("%u", c.block_size);
      ImGui::TableNextColumn();
      ImGui::Text("%" PRIu64, c.live_blocks);
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(format_bytes(c.live_bytes).c_str());
      ImGui::TableNextColumn();
      ImGui::Text("%" PRIu64, c.spans_hot);
      ImGui::TableNextColumn();
      ImGui::Text("%" PRIu64, c.spans_full);
      ImGui::TableNextColumn();
      ImGui::Text("%" PRIu64, c.spans_partial);
      ImGui::TableNextColumn();
      fullness_bar(c.fullness);
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(format_bytes(c.committed_bytes).c_str());
    }
    ImGui::EndTable();
  }
  ImGui::BeginChild("heat");
  heatmap(app.figures.classes);
  ImGui::EndChild();
  ImGui::End();
}

}  // namespace fwi
