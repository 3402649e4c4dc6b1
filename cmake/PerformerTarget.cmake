# Common settings for every target built from our own sources: warnings as
# errors (PERFORMER_WARNINGS_AS_ERRORS), repo-root include paths, and a
# precompiled LibTorch header so that 2-core machines do not re-parse torch
# in every translation unit.
function(performer_target_defaults target)
  set(werror)
  if(PERFORMER_WARNINGS_AS_ERRORS)
    set(werror -Werror)
  endif()
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra ${werror} -Wno-unused-parameter>)
  target_include_directories(${target} PUBLIC ${CMAKE_SOURCE_DIR} ${CMAKE_BINARY_DIR})
  # Every target (the precompiled header's included) gets the same OpenMP
  # flags: see find_package(OpenMP) in the top-level CMakeLists.txt.
  target_link_libraries(${target} PUBLIC OpenMP::OpenMP_CXX)
endfunction()

# Adds the torch precompiled header to a target that includes torch. The
# header is compiled once, for the tiny performer_torch_pch target, and every
# other target reuses it: each compilation of it costs about two minutes of
# one core. Targets that reuse it must not add target-wide compile
# definitions (use source-local ones with SKIP_PRECOMPILE_HEADERS).
function(performer_torch_pch target)
  target_precompile_headers(${target} REUSE_FROM performer_torch_pch)
endfunction()

# bench/gpu_kernel_bench: torch and kernels/ only, no Google Benchmark, so
# that the core-less GPU build has it too (docs/gpu.md).
function(performer_gpu_kernel_bench)
  add_executable(gpu_kernel_bench ${CMAKE_SOURCE_DIR}/bench/gpu_kernel_bench.cc)
  performer_target_defaults(gpu_kernel_bench)
  performer_torch_pch(gpu_kernel_bench)
  target_link_libraries(gpu_kernel_bench PRIVATE performer_kernels)
endfunction()

# bench/gpu_decode_bench: whole-model decoding, CUDA vs CPU; core/ without
# Google Benchmark. Uses bench/'s support library when bench/ defines it.
function(performer_gpu_decode_bench)
  add_executable(gpu_decode_bench ${CMAKE_SOURCE_DIR}/bench/gpu_decode_bench.cc)
  performer_target_defaults(gpu_decode_bench)
  performer_torch_pch(gpu_decode_bench)
  if(TARGET performer_bench_support)
    target_link_libraries(gpu_decode_bench PRIVATE performer_bench_support)
  else()
    target_sources(gpu_decode_bench PRIVATE ${CMAKE_SOURCE_DIR}/bench/bench_model.cc)
    target_link_libraries(gpu_decode_bench PRIVATE performer_core)
  endif()
endfunction()
