// Host code built with only `pkg-config --cflags smprof` (tests/install): the
// header is usable outside nvcc, where the markers compile to nothing.
#include <smprof/smprof.cuh>

int main() {
  SMPROF_INSTANT("host");
  return 0;
}
