// inspector/gui/gui.cpp: freeway-inspect's window: arguments, GLFW + OpenGL 3
// + Dear ImGui setup, the layout of the windows, the event loop, screenshots.
//
//   freeway-inspect [PID] [--replay FILE] [--hz N] [--size WxH]
//                   [--screenshot FILE.png [--frames N]]
//
// Without PID or --replay it opens the process picker. The loop sleeps until
// the next snapshot is due or input arrives (glfwWaitEventsTimeout), so an
// idle inspector costs little CPU. --screenshot renders N frames (default 30)
// at the snapshot rate, writes the last one as a PNG, prints the time from
// start to the first frame and the mean frame time, and exits.
#include "inspector/gui/gui.h"

#define GLFW_INCLUDE_NONE
#include <sys/stat.h>

#include <GLFW/glfw3.h>
#include <GL/gl.h>
#include <backends/imgui_impl_glfw.h>
#include <backends/imgui_impl_opengl3.h>
#include <imgui.h>
#include <stb_image_write.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "inspector/gui/app.h"
#include "inspector/gui/views.h"

namespace fwi {

namespace {

using Clock = std::chrono::steady_clock;

int usage_error(const char* what, const char* arg = nullptr) {
  if (arg)
    std::fprintf(stderr, "freeway-inspect: %s: %s (see freeway-inspect help)\n", what, arg);
  else
    std::fprintf(stderr, "freeway-inspect: %s (see freeway-inspect help)\n", what);
  return 2;
}

bool parse_uint(const char* s, unsigned long lo, unsigned long hi, unsigned long* out) {
  if (!s || !*s) return false;
  for (const char* p = s; *p; p++)
    if (*p < '0' || *p > '9') return false;
  errno = 0;
  char* end = nullptr;
  unsigned long v = std::strtoul(s, &end, 10);
  if (errno || *end || v < lo || v > hi) return false;
  *out = v;
  return true;
}

struct Options {
  uint64_t pid = 0;
  std::string replay, screenshot;
  unsigned frames = 30, hz = 0, width = 1600, height = 960;
};

// Returns 0 and fills o, or the exit code of a usage error (already printed).
int parse(int argc, char** argv, Options* o) {
  for (int i = 1; i < argc; i++) {
    std::string a = argv[i];
    auto value = [&](const char* name) -> const char* {
      if (i + 1 >= argc) return nullptr;
      (void)name;
      return argv[++i];
    };
    unsigned long v;
    if (a == "--replay") {
      const char* f = value("--replay");
      if (!f) return usage_error("--replay needs a file");
      o->replay = f;
    } else if (a == "--screenshot") {
      const char* f = value("--screenshot");
      if (!f) return usage_error("--screenshot needs a file name");
      o->screenshot = f;
    } else if (a == "--frames") {
      if (!parse_uint(value("--frames"), 1, 100000, &v)) return usage_error("--frames needs a number from 1 to 100000");
      o->frames = unsigned(v);
    } else if (a == "--hz") {
      if (!parse_uint(value("--hz"), 1, 60, &v)) return usage_error("--hz needs a number from 1 to 60");
      o->hz = unsigned(v);
    } else if (a == "--size") {
      const char* s = value("--size");
      unsigned w = 0, h = 0;
      char extra;
      if (!s || std::sscanf(s, "%ux%u%c", &w, &h, &extra) != 2 || w < 640 || h < 400 || w > 8192 || h > 8192)
        return usage_error("--size needs WIDTHxHEIGHT, at least 640x400, e.g. 1600x960");
      o->width = w;
      o->height = h;
    } else if (!a.empty() && a[0] != '-' && o->pid == 0 && parse_uint(a.c_str(), 1, 0x7fffffff, &v)) {
      o->pid = v;
    } else if (!a.empty() && a[0] != '-') {
      return usage_error("not a process id or a command", a.c_str());
    } else {
      return usage_error("unknown option", a.c_str());
    }
  }
  if (o->pid && !o->replay.empty()) return usage_error("give a PID or --replay FILE, not both");
  if (!o->screenshot.empty() && !o->pid && o->replay.empty())
    return usage_error("--screenshot needs a PID or --replay FILE");
  return 0;
}

void style() {
  ImGui::StyleColorsDark();
  ImGuiStyle& s = ImGui::GetStyle();
  s.WindowRounding = 4;
  s.FrameRounding = 3;
  s.GrabRounding = 3;
  s.WindowBorderSize = 1;
  s.WindowPadding = ImVec2(10, 8);
  s.ItemSpacing = ImVec2(8, 5);
  ImVec4* c = s.Colors;
  c[ImGuiCol_WindowBg] = ImVec4(0.105f, 0.11f, 0.13f, 1);
  c[ImGuiCol_ChildBg] = ImVec4(0.09f, 0.095f, 0.11f, 1);
  c[ImGuiCol_TitleBg] = ImVec4(0.13f, 0.14f, 0.17f, 1);
  c[ImGuiCol_TitleBgActive] = ImVec4(0.16f, 0.18f, 0.22f, 1);
  c[ImGuiCol_Header] = ImVec4(0.22f, 0.25f, 0.31f, 1);
  c[ImGuiCol_TableHeaderBg] = ImVec4(0.16f, 0.18f, 0.22f, 1);
  c[ImGuiCol_Button] = ImVec4(0.22f, 0.25f, 0.31f, 1);
  c[ImGuiCol_FrameBg] = ImVec4(0.16f, 0.17f, 0.21f, 1);
  c[ImGuiCol_SliderGrab] = ImVec4(0.94f, 0.67f, 0.16f, 1);
  c[ImGuiCol_CheckMark] = ImVec4(0.94f, 0.67f, 0.16f, 1);
}

// The font: DejaVu Sans (Debian's fonts-dejavu-core, installed by the Makefile).
void load_font() {
  static const char* const kFonts[] = {"/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
                                       "/usr/share/fonts/TTF/DejaVuSans.ttf"};
  ImGuiIO& io = ImGui::GetIO();
  for (const char* f : kFonts) {
    if (FILE* fp = std::fopen(f, "rb")) {
      std::fclose(fp);
      if (io.Fonts->AddFontFromFileTTF(f, 15.0f)) return;
    }
  }
  std::fprintf(stderr, "freeway-inspect: DejaVu Sans not found (Debian package fonts-dejavu-core); using ImGui's built-in font\n");
}

void layout(App& app, UiState& ui, int w, int h) {
  const float W = float(w), H = float(h);
  const float bar = app.error.empty() && app.violations.empty() ? 62.0f : 84.0f;
  draw_toolbar(app, ui, Rect{0, 0, W, bar});
  const float top = bar, rest = H - bar;
  const float left_w = std::floor(W * 0.56f);
  const float heap_h = std::floor(rest * 0.40f);
  draw_overview(app, ui, Rect{0, top, left_w, heap_h});
  draw_span_map(app, ui, Rect{0, top + heap_h, left_w, rest - heap_h});
  const float right_w = W - left_w;
  const float classes_h = std::floor(rest * 0.50f), caches_h = std::floor(rest * 0.22f);
  draw_classes(app, ui, Rect{left_w, top, right_w, classes_h});
  draw_caches(app, ui, Rect{left_w, top + classes_h, right_w, caches_h});
  draw_events(app, ui, Rect{left_w, top + classes_h + caches_h, right_w, rest - classes_h - caches_h});
}

bool write_png(const std::string& path, int w, int h, std::string* err) {
  std::vector<unsigned char> px(size_t(w) * size_t(h) * 4);
  glPixelStorei(GL_PACK_ALIGNMENT, 1);
  glReadBuffer(GL_BACK);
  glReadPixels(0, 0, w, h, GL_RGBA, GL_UNSIGNED_BYTE, px.data());
  // OpenGL's rows go bottom-up; PNG's top-down. Opaque alpha.
  std::vector<unsigned char> out(px.size());
  const size_t row = size_t(w) * 4;
  for (int y = 0; y < h; y++) std::memcpy(&out[size_t(y) * row], &px[size_t(h - 1 - y) * row], row);
  for (size_t i = 3; i < out.size(); i += 4) out[i] = 255;
  // Encoded in memory, then written here: stbi_write_png ignores what fwrite
  // and fclose return (a full disk gave a truncated PNG and success).
  std::vector<unsigned char> png;
  auto append = [](void* to, void* data, int size) {
    auto* v = static_cast<std::vector<unsigned char>*>(to);
    v->insert(v->end(), static_cast<unsigned char*>(data), static_cast<unsigned char*>(data) + size);
  };
  if (!stbi_write_png_to_func(append, &png, w, h, 4, out.data(), int(row)) || png.empty()) {
    *err = "cannot encode the screenshot as PNG";
    return false;
  }
  errno = 0;
  FILE* f = std::fopen(path.c_str(), "wb");
  bool ok = f != nullptr && std::fwrite(png.data(), 1, png.size(), f) == png.size();
  if (f != nullptr && std::fclose(f) != 0) ok = false;
  if (!ok) {
    *err = "cannot write " + path + ": " + std::strerror(errno ? errno : EIO);
    // No truncated PNG left behind: a regular file only (never a device such as /dev/full).
    struct stat st;
    if (f != nullptr && stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode)) std::remove(path.c_str());
    return false;
  }
  return true;
}

void glfw_error(int code, const char* what) {
  // Reported once the failing call returns (with the exit code); keep the text.
  static std::string* last = new std::string;
  *last = what ? what : "";
  (void)code;
}

}  // namespace

int gui_main(int argc, char** argv) {
  const auto t_start = Clock::now();
  Options opt;
  if (int rc = parse(argc, argv, &opt)) return rc;

  // The source first: a bad pid or file is an error before any window opens.
  App app;
  std::string err;
  if (opt.pid && !app.attach(opt.pid, &err)) {
    std::fprintf(stderr, "freeway-inspect: %s\n", err.c_str());
    return 2;
  }
  const auto t_attached = Clock::now();
  if (!opt.replay.empty() && !app.open_replay(opt.replay, &err)) {
    std::fprintf(stderr, "freeway-inspect: %s\n", err.c_str());
    return 2;
  }
  if (opt.hz) app.hz = opt.hz;

  glfwSetErrorCallback(glfw_error);
  if (!glfwInit()) {
    const char* d = std::getenv("DISPLAY");
    const char* wl = std::getenv("WAYLAND_DISPLAY");
    std::fprintf(stderr, "freeway-inspect: cannot open a window (%s); the CLI needs none: freeway-inspect help\n",
                 (!d || !*d) && (!wl || !*wl) ? "no display: DISPLAY is not set" : "GLFW could not initialise");
    return 2;
  }
  glfwWindowHint(GLFW_CONTEXT_VERSION_MAJOR, 3);
  glfwWindowHint(GLFW_CONTEXT_VERSION_MINOR, 0);
  if (!opt.screenshot.empty()) glfwWindowHint(GLFW_RESIZABLE, GLFW_FALSE);
  std::string title = "freeway-inspect - " + (app.label.empty() ? std::string("processes") : app.label);
  GLFWwindow* win = glfwCreateWindow(int(opt.width), int(opt.height), title.c_str(), nullptr, nullptr);
  if (!win) {
    std::fprintf(stderr, "freeway-inspect: cannot open a window (no OpenGL 3 context; is Mesa's libgl1-mesa-dri installed?)\n");
    glfwTerminate();
    return 2;
  }
  glfwMakeContextCurrent(win);
  glfwSwapInterval(opt.screenshot.empty() ? 1 : 0);

  IMGUI_CHECKVERSION();
  ImGui::CreateContext();
  ImGuiIO& io = ImGui::GetIO();
  io.IniFilename = nullptr;  // a fixed layout, computed from the window size
  style();
  load_font();
  ImGui_ImplGlfw_InitForOpenGL(win, true);
  ImGui_ImplOpenGL3_Init("#version 130");

  UiState ui;
  unsigned frames = 0;
  double frame_ms_sum = 0, build_ms_sum = 0, frame_ms_max = 0, first_frame_ms = 0;
  int rc = 0;
  while (!glfwWindowShouldClose(win)) {
    if (!opt.screenshot.empty()) {
      // One frame per snapshot, so the plots fill as they would live.
      // (At most one snapshot period: an exited process is not polled at all.)
      if (frames > 0)
        std::this_thread::sleep_for(std::chrono::duration<double>(std::min(app.seconds_to_next_poll(), 1.0 / app.hz)));
      glfwPollEvents();
    } else {
      glfwWaitEventsTimeout(std::clamp(app.seconds_to_next_poll(), 0.001, 0.25));
    }
    const auto t0 = Clock::now();
    app.poll();
    if (ui.want_attach || ui.want_detach) {
      if (ui.want_attach && app.attach(ui.picked_pid, &err)) {
        app.error.clear();
        if (opt.hz) app.hz = opt.hz;  // --hz holds for every source, not only the first
      } else if (ui.want_attach) {
        app.error = err;
      } else {
        app.detach();
      }
      ui.want_attach = ui.want_detach = false;
      ui.selected_span = -1;  // an index into the previous source's spans
      title = "freeway-inspect - " + (app.label.empty() ? std::string("processes") : app.label);
      glfwSetWindowTitle(win, title.c_str());
    }
    ImGui_ImplOpenGL3_NewFrame();
    ImGui_ImplGlfw_NewFrame();
    ImGui::NewFrame();
    int w, h;
    glfwGetFramebufferSize(win, &w, &h);
    if (app.kind == SourceKind::none)
      draw_picker(app, ui, Rect{0, 0, float(w), float(h)});
    else
      layout(app, ui, w, h);
    ImGui::Render();
    ui.build_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    glViewport(0, 0, w, h);
    glClearColor(0.07f, 0.075f, 0.09f, 1);
    glClear(GL_COLOR_BUFFER_BIT);
    ImGui_ImplOpenGL3_RenderDrawData(ImGui::GetDrawData());
    glFinish();
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    ui.frame_ms = ms;
    frames++;
    if (frames == 1) {
      first_frame_ms = std::chrono::duration<double, std::milli>(Clock::now() - t_start).count();
    } else {
      frame_ms_sum += ms;
      build_ms_sum += ui.build_ms;
      frame_ms_max = std::max(frame_ms_max, ms);
    }
    if (!opt.screenshot.empty() && frames >= opt.frames) {
      if (!write_png(opt.screenshot, w, h, &err)) {
        std::fprintf(stderr, "freeway-inspect: %s\n", err.c_str());
        rc = 2;
      } else {
        const size_t spans = app.current ? app.current->spans.size() : 0;
        std::printf("screenshot %s: %dx%d after %u frames; start to first frame %.1f ms (attach %.1f ms, attach to "
                    "first frame %.1f ms); "
                    "frame time mean %.2f ms (ImGui %.2f ms, the rest OpenGL), max %.2f ms; %zu spans, live %s, "
                    "committed %s%s\n",
                    opt.screenshot.c_str(), w, h, frames, first_frame_ms,
                    std::chrono::duration<double, std::milli>(t_attached - t_start).count(),
                    first_frame_ms - std::chrono::duration<double, std::milli>(t_attached - t_start).count(),
                    frames > 1 ? frame_ms_sum / (frames - 1) : 0.0, frames > 1 ? build_ms_sum / (frames - 1) : 0.0,
                    frame_ms_max, spans,
                    format_bytes(app.figures.live).c_str(), format_bytes(app.figures.committed).c_str(),
                    app.exited ? "; the process exited (its last state shown)" : "");
      }
      break;
    }
    glfwSwapBuffers(win);
  }
  ImGui_ImplOpenGL3_Shutdown();
  ImGui_ImplGlfw_Shutdown();
  ImGui::DestroyContext();
  glfwDestroyWindow(win);
  glfwTerminate();
  return rc;
}

}  // namespace fwi
