# The browser's WebAssembly build (EMSCRIPTEN; `make test-web` configures it with emcmake in build-web/): the
# same core, compiled for wasm32 with SIMD128, run by Node (Debian's nodejs) where a test needs a process:
#   blocklab.js   the CLI (`node build-web/blocklab.js --version` names the wasm_simd128 level)
#   test_*.js     the kernel and model tests of the list below, GoogleTest compiled from Debian's sources
# Node reads the host's files directly (NODERAWFS): the tests read tests/data as the native ones do.
set(BLOCKLAB_NODE_LINK_OPTIONS -sNODERAWFS=1 -sALLOW_MEMORY_GROWTH=1 -sEXIT_RUNTIME=1 -sTOTAL_STACK=8388608)
target_link_options(blocklab PRIVATE ${BLOCKLAB_NODE_LINK_OPTIONS})

# Node 18 and later have fetch(), which Emscripten 3.1.6's loader then uses for the .wasm beside the script
# and which cannot read a file path; without it the loader reads the file.
find_program(NODE_EXECUTABLE NAMES node nodejs REQUIRED)
set(BLOCKLAB_NODE ${NODE_EXECUTABLE} --no-experimental-fetch)

# GoogleTest from Debian's googletest package (/usr/src/googletest), built here with em++.
set(GTEST_SOURCE_DIR /usr/src/googletest CACHE PATH "GoogleTest's sources")
if(NOT EXISTS ${GTEST_SOURCE_DIR}/CMakeLists.txt)
  message(FATAL_ERROR "${GTEST_SOURCE_DIR} not found: apt-get install googletest")
endif()
set(gtest_disable_pthreads ON CACHE BOOL "" FORCE)
set(BUILD_GMOCK OFF CACHE BOOL "" FORCE)
set(INSTALL_GTEST OFF CACHE BOOL "" FORCE)
add_subdirectory(${GTEST_SOURCE_DIR} ${CMAKE_BINARY_DIR}/googletest EXCLUDE_FROM_ALL)

enable_testing()
# The tests of the kernels (forward/backward pairs against central differences, every sgemm shape at both of
# this build's levels) and of the model (whole-model gradients, the designs, PyTorch parity from the fixtures,
# training, the curvature probe). The rest need processes (the CLI, worker pools) or libraries this build
# leaves out.
set(BLOCKLAB_WEB_TESTS kernels kernels_block kernels_gating kernels_unit_norm sgemm gemm_portable isa model designs
    reference_parity curvature train dtype hf_kernels)
add_library(blocklab_test_main STATIC tests/test_main.cpp)
target_link_libraries(blocklab_test_main PUBLIC blocklab_core gtest)
target_compile_options(blocklab_test_main PUBLIC -Wall -Wextra)
target_include_directories(blocklab_test_main PUBLIC tests)
target_compile_definitions(blocklab_test_main PUBLIC BLOCKLAB_TEST_DATA="${CMAKE_SOURCE_DIR}/tests/data"
  BLOCKLAB_CLI="$<TARGET_FILE:blocklab>")
foreach(name ${BLOCKLAB_WEB_TESTS})
  add_executable(test_${name} tests/test_${name}.cpp)
  target_link_libraries(test_${name} PRIVATE blocklab_test_main)
  target_link_options(test_${name} PRIVATE ${BLOCKLAB_NODE_LINK_OPTIONS})
  add_test(NAME ${name} COMMAND ${BLOCKLAB_NODE} $<TARGET_FILE:test_${name}>)
  set_tests_properties(${name} PROPERTIES SKIP_REGULAR_EXPRESSION "\\[  PASSED  \\] 0 tests")
endforeach()
add_test(NAME version_names_the_wasm_level COMMAND ${BLOCKLAB_NODE} $<TARGET_FILE:blocklab> --version)
set_tests_properties(version_names_the_wasm_level PROPERTIES
  PASS_REGULAR_EXPRESSION "instruction set: wasm_simd128 .*sgemm wasm_simd128")

# The page (web/page/, `make web`): the module blocklab_web.{js,wasm} (web/api.cpp: JSON in, JSON out), the
# page's own HTML, JS and CSS, Chart.js from Debian's libjs-chart.js, and the Korean wording from po/ko.po, all
# copied into build-web/dist/: a static site that loads nothing from elsewhere.
add_executable(blocklab_web web/api.cpp)
target_link_libraries(blocklab_web PRIVATE blocklab_core)
target_compile_options(blocklab_web PRIVATE -Wall -Wextra)
target_link_options(blocklab_web PRIVATE -lembind -sMODULARIZE=1 -sEXPORT_NAME=createBlocklab
  -sENVIRONMENT=web,worker,node -sALLOW_MEMORY_GROWTH=1 -sTOTAL_STACK=8388608)
set(BLOCKLAB_CHART_JS /usr/share/javascript/chart.js/chart.min.js CACHE FILEPATH "Chart.js (UMD build)")
if(NOT EXISTS ${BLOCKLAB_CHART_JS})
  message(FATAL_ERROR "${BLOCKLAB_CHART_JS} not found: apt-get install libjs-chart.js")
endif()
find_package(Python3 COMPONENTS Interpreter REQUIRED)
set(BLOCKLAB_DIST ${CMAKE_BINARY_DIR}/dist)
file(GLOB BLOCKLAB_PAGE_FILES CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/web/page/*)
add_custom_command(OUTPUT ${BLOCKLAB_DIST}/ko.json
  COMMAND ${CMAKE_COMMAND} -E make_directory ${BLOCKLAB_DIST}
  COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tools/po2json.py ${CMAKE_SOURCE_DIR}/po/ko.po ${BLOCKLAB_DIST}/ko.json
  DEPENDS ${CMAKE_SOURCE_DIR}/po/ko.po ${CMAKE_SOURCE_DIR}/tools/po2json.py
  COMMENT "po/ko.po -> dist/ko.json")
add_custom_target(web ALL
  COMMAND ${CMAKE_COMMAND} -E make_directory ${BLOCKLAB_DIST}
  COMMAND ${CMAKE_COMMAND} -E copy ${BLOCKLAB_PAGE_FILES} ${BLOCKLAB_DIST}/
  COMMAND ${CMAKE_COMMAND} -E copy $<TARGET_FILE:blocklab_web> $<TARGET_FILE_DIR:blocklab_web>/blocklab_web.wasm
          ${BLOCKLAB_DIST}/
  COMMAND ${CMAKE_COMMAND} -E copy ${BLOCKLAB_CHART_JS} ${BLOCKLAB_DIST}/chart.min.js
  DEPENDS blocklab_web ${BLOCKLAB_PAGE_FILES} ${BLOCKLAB_DIST}/ko.json
  COMMENT "the page in ${BLOCKLAB_DIST}")
# The module's entry points under Node: JSON answers, the CLI's error messages, sessions that step and stop.
add_test(NAME web_api COMMAND ${BLOCKLAB_NODE} ${CMAKE_SOURCE_DIR}/web/test_api.js $<TARGET_FILE:blocklab_web>)
