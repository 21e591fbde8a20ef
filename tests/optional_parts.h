#pragma once
// Tests that need an optional part of the build (docs/development.md, "Optional parts of the build") skip,
// saying which, in a build without it.
#include <gtest/gtest.h>

#include "text/unicode.h"
#include "train/run_config.h"

#define BLOCKLAB_NEEDS_TEXT()                                                                            \
  if (!::blocklab::text::have_text())                                                                    \
  GTEST_SKIP() << "the text task is not in this build (utf8proc and PCRE2: -DBLOCKLAB_TEXT=OFF or not installed)"
#define BLOCKLAB_NEEDS_TOML()                                                                            \
  if (!::blocklab::have_toml())                                                                          \
  GTEST_SKIP() << "TOML config files are not in this build (toml++: -DBLOCKLAB_TOML=OFF or not installed)"
