# Common settings for every target built from our own sources: warnings as
# errors, repo-root include paths, and a precompiled LibTorch header so that
# 2-core machines do not re-parse torch in every translation unit.
function(performer_target_defaults target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Werror -Wno-unused-parameter>)
  target_include_directories(${target} PUBLIC ${CMAKE_SOURCE_DIR} ${CMAKE_BINARY_DIR})
endfunction()

# Adds the torch precompiled header to a target that includes torch. The
# header is compiled once, for performer_kernels (the first target), and every
# other target reuses it: each compilation of it costs about two minutes of
# one core.
function(performer_torch_pch target)
  if(target STREQUAL "performer_kernels")
    target_precompile_headers(${target} PRIVATE
      $<$<COMPILE_LANGUAGE:CXX>:${CMAKE_SOURCE_DIR}/core/torch_pch.h>)
  else()
    target_precompile_headers(${target} REUSE_FROM performer_kernels)
  endif()
endfunction()
