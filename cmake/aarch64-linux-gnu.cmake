# Cross-compiling for 64-bit ARM Linux on a Debian x86-64 host: Debian's cross compilers
# (g++-aarch64-linux-gnu) and the arm64 builds of the libraries, installed side by side with the host's through
# multiarch (dpkg --add-architecture arm64; apt-get install libopenblas-dev:arm64 ...). Used by
# `make test-arm64` (tools/test-arm64.sh), which runs the tests under qemu-aarch64.
#   cmake -S . -B build-arm64 -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake
# With CXX=clang++, clang cross-compiles for the same target against the same sysroot.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)
if("$ENV{CXX}" MATCHES "clang")
  set(CMAKE_CXX_COMPILER clang++)
  set(CMAKE_CXX_COMPILER_TARGET aarch64-linux-gnu)
else()
  set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
endif()
# Programs are found on the host; libraries and headers in the arm64 multiarch directories (the host's
# /usr/lib/x86_64-linux-gnu is never searched: CMAKE_LIBRARY_ARCHITECTURE selects /usr/lib/aarch64-linux-gnu),
# arch-independent headers (nlohmann/json, CLI11) in /usr/include.
set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE BOTH)
# pkg-config reads the arm64 .pc files (utf8proc, PCRE2), never the host's.
set(ENV{PKG_CONFIG_LIBDIR} /usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig)
# ctest runs each test binary through the emulator (CMAKE_CROSSCOMPILING_EMULATOR); QEMU_LD_PREFIX points
# it at the arm64 loader and libraries.
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64)
