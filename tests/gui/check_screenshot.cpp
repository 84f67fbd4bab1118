// check_screenshot FILE.png MIN_STATES MIN_PIXELS
//
// Checks a screenshot of freeway-inspect for content: it must not be blank
// (at least 50 distinct colours), and at least MIN_STATES span states must
// each cover at least MIN_PIXELS pixels in their span-map colours. The
// colours come from inspector/gui/palette.h; no other part of the GUI uses
// them, and the span map's legend squares (about 121 pixels each) stay below
// any sensible MIN_PIXELS. Prints the pixels counted per state.
#include <stb_image.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <set>

#include "inspector/gui/palette.h"
#include "inspector/model/derive.h"

namespace {

bool near(int a, double b) { return std::fabs(a - b) <= 2.0; }

bool is_shade(const unsigned char* px, fwi::Rgb c, double k) {
  return near(px[0], c.r * k) && near(px[1], c.g * k) && near(px[2], c.b * k);
}

// Whether px is drawn in state st's colour as span_map_view.cpp draws it.
bool in_state(const unsigned char* px, unsigned st) {
  const fwi::Rgb c = fwi::kStateColour[st];
  switch (st) {
    case FWT_SPAN_HOT:
    case FWT_SPAN_FULL:
    case FWT_SPAN_PARTIAL: {  // shaded by occupancy: 0.45 .. 1
      const int top = std::max({int(c.r), int(c.g), int(c.b)});
      const int got = top == c.r ? px[0] : top == c.g ? px[1] : px[2];
      const double k = double(got) / top;
      return k >= 0.44 && k <= 1.0 && is_shade(px, c, k);
    }
    case FWT_SPAN_FREE:
      return is_shade(px, c, 1.0) || is_shade(px, c, 0.45);
    case FWT_SPAN_HUGE:
      return is_shade(px, c, 1.0) || is_shade(px, c, 0.45 + 0.55 * 0.6);
    default:
      return is_shade(px, c, 1.0);
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: check_screenshot FILE.png MIN_STATES MIN_PIXELS\n");
    return 2;
  }
  const int min_states = std::atoi(argv[2]);
  const long min_pixels = std::atol(argv[3]);
  int w = 0, h = 0, n = 0;
  unsigned char* img = stbi_load(argv[1], &w, &h, &n, 4);
  if (!img) {
    std::printf("FAIL: cannot read %s as an image\n", argv[1]);
    return 1;
  }
  long counts[FWT_SPAN_STATE_COUNT] = {};
  std::set<unsigned> colours;
  for (long i = 0; i < long(w) * h; i++) {
    const unsigned char* px = img + i * 4;
    colours.insert(unsigned(px[0]) << 16 | unsigned(px[1]) << 8 | px[2]);
    for (unsigned st = 0; st < FWT_SPAN_STATE_COUNT; st++)
      if (in_state(px, st)) {
        counts[st]++;
        break;
      }
  }
  stbi_image_free(img);
  int states = 0;
  std::printf("%s: %dx%d, %zu distinct colours; pixels per state colour:", argv[1], w, h, colours.size());
  for (unsigned st = 0; st < FWT_SPAN_STATE_COUNT; st++) {
    std::printf(" %s %ld", fwi::state_name(st), counts[st]);
    if (counts[st] >= min_pixels) states++;
  }
  std::printf("\n");
  if (colours.size() < 50) {
    std::printf("FAIL: the image is (nearly) blank: %zu colours\n", colours.size());
    return 1;
  }
  if (states < min_states) {
    std::printf("FAIL: %d state colours cover at least %ld pixels each; expected at least %d\n", states, min_pixels,
                min_states);
    return 1;
  }
  std::printf("ok: %d state colours cover at least %ld pixels each\n", states, min_pixels);
  return 0;
}
