// inspector/gui/views.h: the windows of freeway-inspect, one file each.
// Every view reads the App (inspector/gui/app.h) and draws with Dear ImGui;
// none of them parses telemetry (the model does).
#pragma once
#include "inspector/gui/app.h"

struct ImVec2;

namespace fwi {

// Where each window goes (the layout is computed from the display size each
// frame; there is no saved ini, so screenshots are reproducible).
struct Rect {
  float x, y, w, h;
};

// The UI state the views share besides the App.
struct UiState {
  int64_t selected_span = -1;   // span index clicked in the span map
  float cell = 0.0f;            // span map cell size in pixels (below 3: fit the window)
  bool follow_events = true;    // the event log scrolls to the newest line
  bool want_attach = false;     // the picker chose picked_pid
  uint64_t picked_pid = 0;
  bool want_detach = false;
  double frame_ms = 0;          // time of the last frame: build (ImGui) + render (OpenGL, finished)
  double build_ms = 0;          // the ImGui part of it
};

void draw_picker(App& app, UiState& ui, Rect r);        // picker_view.cpp
void draw_toolbar(App& app, UiState& ui, Rect r);       // toolbar_view.cpp: pause, scrub, status
void draw_overview(App& app, UiState& ui, Rect r);      // overview_view.cpp: figures and plots
void draw_span_map(App& app, UiState& ui, Rect r);      // span_map_view.cpp
void draw_classes(App& app, UiState& ui, Rect r);       // classes_view.cpp: table and occupancy heatmap
void draw_caches(App& app, UiState& ui, Rect r);        // caches_view.cpp: thread caches
void draw_events(App& app, UiState& ui, Rect r);        // events_view.cpp

// Shared widgets (widgets.cpp).
// Begins a fixed window at r (no move, no resize); always pair with ImGui::End().
bool begin_fixed(const char* title, Rect r, int extra_flags = 0);
// A line plot of up to 4 series over the history, with a cursor line.
struct Series {
  const char* name;
  uint32_t colour;
  const float* values;
};
void plot_lines(const char* id, const Series* series, int n_series, int n_values, float height, int cursor,
                const char* (*format_value)(double, char*, int));
const char* format_bytes_axis(double v, char* buf, int n);
const char* format_ratio_axis(double v, char* buf, int n);

}  // namespace fwi
