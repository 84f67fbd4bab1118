// inspector/gui/palette.h: the colours of span states, shared by the span map,
// its legend and the plots. Colours are RGBA bytes (ImGui's IM_COL32 order).
// tests/gui/check_screenshot.cpp includes this header to find the state
// colours in screenshots.
#pragma once
#include <cstdint>

#include "freeway_telemetry.h"

namespace fwi {

struct Rgb {
  uint8_t r, g, b;
};

// Full-occupancy colour of each fwt_span_state; small spans are drawn darker
// the emptier they are (see shade()).
constexpr Rgb kStateColour[FWT_SPAN_STATE_COUNT] = {
    {70, 110, 160},   // FREE: pooled, committed (decommitted pools are drawn dimmer)
    {240, 170, 40},   // HOT: a thread cache allocates from it
    {215, 70, 60},    // FULL
    {90, 190, 110},   // PARTIAL: reusable
    {170, 110, 220},  // LARGE head
    {130, 85, 175},   // LARGE_TAIL
    {225, 90, 200},   // HUGE
    {38, 40, 46},     // UNUSED: address space only
};

// A small span's colour shaded by how full it is: 45% brightness when empty,
// 100% when every block is in use.
inline Rgb shade(Rgb c, double occupancy) {
  if (occupancy < 0) occupancy = 0;
  if (occupancy > 1) occupancy = 1;
  double k = 0.45 + 0.55 * occupancy;
  return Rgb{uint8_t(c.r * k), uint8_t(c.g * k), uint8_t(c.b * k)};
}

inline uint32_t rgba(Rgb c, uint8_t a = 255) {
  return uint32_t(c.r) | (uint32_t(c.g) << 8) | (uint32_t(c.b) << 16) | (uint32_t(a) << 24);
}

// Every other colour of the GUI differs from the state colours and their
// shades, so in a screenshot those come from the span map alone (and its
// legend's squares): tests/gui/check_screenshot.cpp counts them.
constexpr Rgb kLiveColour = {100, 200, 225};
constexpr Rgb kCommittedColour = {245, 215, 110};
constexpr Rgb kRssColour = {150, 140, 240};
constexpr Rgb kBlowupColour = {240, 120, 160};
constexpr Rgb kFreeInSpansColour = {190, 100, 90};
constexpr Rgb kPooledColour = {95, 120, 150};
constexpr Rgb kLargeSlackColour = {160, 130, 190};
constexpr Rgb kMetadataColour = {140, 140, 140};
constexpr Rgb kFullnessColour = {110, 150, 210};
constexpr Rgb kHeatColour = {120, 160, 255};

}  // namespace fwi
