// inspector/gui/caches_view.cpp: the "Caches" window: every cache (LAB), who
// holds it (a live thread, a CPU's slot in per-CPU mode, nobody), what it
// holds and what waits.
#include <imgui.h>

#include <cinttypes>

#include "inspector/gui/views.h"

namespace fwi {

void draw_caches(App& app, UiState&, Rect r) {
  if (!begin_fixed("Caches", r)) {
    ImGui::End();
    return;
  }
  const Figures& f = app.figures;
  if (f.caches_in_cpu_slots > 0)
    ImGui::Text("per-CPU caches: %zu in CPU slots, %zu caches", f.caches_in_cpu_slots, f.labs.size());
  else
    ImGui::Text("%" PRIu64 " threads live, %zu caches", f.threads_live, f.labs.size());
  const ImGuiTableFlags flags =
      ImGuiTableFlags_RowBg | ImGuiTableFlags_ScrollY | ImGuiTableFlags_BordersInnerV | ImGuiTableFlags_SizingStretchProp;
  if (ImGui::BeginTable("labs", 8, flags)) {
    ImGui::TableSetupScrollFreeze(0, 1);
    for (const char* h : {"cache", "held by", "hot spans", "held", "free held", "pending", "allocs", "frees"})
      ImGui::TableSetupColumn(h);
    ImGui::TableHeadersRow();
    ImGuiListClipper clipper;
    clipper.Begin(int(f.labs.size()));
    while (clipper.Step()) {
      for (int i = clipper.DisplayStart; i < clipper.DisplayEnd; i++) {
        const LabFigures& l = f.labs[size_t(i)];
        ImGui::TableNextRow();
        ImGui::TableNextColumn();
        ImGui::Text("%u", l.id);
        ImGui::TableNextColumn();
        if (l.cpu >= 0)
          ImGui::TextColored(ImVec4(0.45f, 0.7f, 0.95f, 1), "CPU %d", l.cpu);
        else if (l.kind == FWT_LAB_CPU)
          ImGui::TextDisabled("a slow path");  // out of its slot for a moment
        else if (l.alive)
          ImGui::TextColored(ImVec4(0.45f, 0.85f, 0.5f, 1), "thread");
        else
          ImGui::TextDisabled(l.kind == FWT_LAB_IDLE ? "idle" : l.kind == FWT_LAB_PARKED ? "parked" : "gone");
        ImGui::TableNextColumn();
        ImGui::Text("%u", l.hot_spans);
        ImGui::TableNextColumn();
        ImGui::TextUnformatted(format_bytes(l.bytes_held).c_str());
        ImGui::TableNextColumn();
        ImGui::TextUnformatted(format_bytes(l.free_bytes_held).c_str());
        ImGui::TableNextColumn();
        ImGui::Text("%u", l.pending);
        ImGui::TableNextColumn();
        ImGui::Text("%" PRIu64, l.allocs);
        ImGui::TableNextColumn();
        ImGui::Text("%" PRIu64, l.frees);
      }
    }
    clipper.End();
    ImGui::EndTable();
  }
  ImGui::End();
}

}  // namespace fwi
