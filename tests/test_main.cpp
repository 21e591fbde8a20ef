// main() of every test program: GoogleTest's, after choosing OpenMP's waiting as the CLI does
// (util/threads.h: prefer_short_openmp_waits; ctest runs two test programs at once on few cores).
#include <gtest/gtest.h>

#include "util/threads.h"

int main(int argc, char** argv) {
  blocklab::prefer_short_openmp_waits(argv);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
