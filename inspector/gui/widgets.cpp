// inspector/gui/widgets.cpp: fixed windows and line plots drawn with the
// ImGui draw list (ImPlot is not in Debian).
#include <imgui.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "inspector/gui/views.h"

namespace fwi {

bool begin_fixed(const char* title, Rect r, int extra_flags) {
  ImGui::SetNextWindowPos(ImVec2(r.x, r.y), ImGuiCond_Always);
  ImGui::SetNextWindowSize(ImVec2(r.w, r.h), ImGuiCond_Always);
  return ImGui::Begin(title, nullptr,
                      ImGuiWindowFlags_NoMove | ImGuiWindowFlags_NoResize | ImGuiWindowFlags_NoCollapse |
                          ImGuiWindowFlags_NoSavedSettings | extra_flags);
}

const char* format_bytes_axis(double v, char* buf, int n) {
  static const char* const kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    u++;
  }
  std::snprintf(buf, size_t(n), v < 10 && u > 0 ? "%.1f %s" : "%.0f %s", v, kUnits[u]);
  return buf;
}

const char* format_ratio_axis(double v, char* buf, int n) {
  std::snprintf(buf, size_t(n), "%.2f", v);
  return buf;
}

void plot_lines(const char* id, const Series* series, int n_series, int n_values, float height, int cursor,
                const char* (*format_value)(double, char*, int)) {
  ImGui::PushID(id);
  const ImVec2 origin = ImGui::GetCursorScreenPos();
  const float width = ImGui::GetContentRegionAvail().x;
  const float label_w = 70.0f;
  ImGui::InvisibleButton("plot", ImVec2(width, height));
  const bool hovered = ImGui::IsItemHovered();
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const ImVec2 box0(origin.x + label_w, origin.y + 4), p1(origin.x + width - 4, origin.y + height - 4);
  dl->AddRectFilled(box0, p1, IM_COL32(24, 26, 32, 255), 3.0f);
  dl->AddRect(box0, p1, IM_COL32(70, 74, 84, 255), 3.0f);
  // The top band holds the legend; the data go below it, so no line crosses its text.
  const ImVec2 p0(box0.x, box0.y + 22);
  double vmax = 0;
  for (int s = 0; s < n_series; s++)
    for (int i = 0; i < n_values; i++) vmax = std::max(vmax, double(series[s].values[i]));
  if (vmax <= 0) vmax = 1;
  vmax *= 1.05;
  char buf[48];
  // Grid and labels: 0, max/2, max.
  for (int g = 0; g <= 2; g++) {
    float y = p1.y - (p1.y - p0.y) * float(g) / 2.0f;
    if (g > 0 && g < 2) dl->AddLine(ImVec2(p0.x, y), ImVec2(p1.x, y), IM_COL32(55, 58, 66, 255));
    format_value(vmax * g / 2.0, buf, sizeof buf);
    ImVec2 ts = ImGui::CalcTextSize(buf);
    dl->AddText(ImVec2(p0.x - ts.x - 6, y - ts.y * 0.5f), IM_COL32(160, 164, 172, 255), buf);
  }
  if (n_values >= 2) {
    const float dx = (p1.x - p0.x) / float(n_values - 1);
    // At most one point per pixel column: stride through long histories.
    const int stride = std::max(1, int(std::ceil(float(n_values) / std::max(1.0f, p1.x - p0.x))));
    for (int s = 0; s < n_series; s++) {
      ImVec2 prev;
      bool have = false;
      for (int i = 0; i < n_values; i += stride) {
        ImVec2 pt(p0.x + dx * float(i), p1.y - (p1.y - p0.y) * float(series[s].values[i] / vmax));
        if (have) dl->AddLine(prev, pt, series[s].colour, 1.6f);
        prev = pt;
        have = true;
      }
      ImVec2 last(p1.x, p1.y - (p1.y - p0.y) * float(series[s].values[n_values - 1] / vmax));
      if (have) dl->AddLine(prev, last, series[s].colour, 1.6f);
    }
    if (cursor >= 0 && cursor < n_values) {
      float x = p0.x + dx * float(cursor);
      dl->AddLine(ImVec2(x, box0.y), ImVec2(x, p1.y), IM_COL32(230, 230, 230, 160), 1.0f);
    }
    if (hovered) {
      int i = int(std::lround((ImGui::GetIO().MousePos.x - p0.x) / dx));
      i = std::clamp(i, 0, n_values - 1);
      ImGui::BeginTooltip();
      for (int s = 0; s < n_series; s++) {
        format_value(series[s].values[i], buf, sizeof buf);
        ImGui::TextColored(ImGui::ColorConvertU32ToFloat4(series[s].colour), "%s: %s", series[s].name, buf);
      }
      ImGui::EndTooltip();
    }
  }
  // Legend, top left inside the plot.
  float lx = p0.x + 8;
  for (int s = 0; s < n_series; s++) {
    dl->AddRectFilled(ImVec2(lx, box0.y + 6), ImVec2(lx + 10, box0.y + 16), series[s].colour);
    dl->AddText(ImVec2(lx + 14, box0.y + 3), IM_COL32(210, 212, 218, 255), series[s].name);
    lx += 24 + ImGui::CalcTextSize(series[s].name).x;
  }
  ImGui::PopID();
}

}  // namespace fwi
