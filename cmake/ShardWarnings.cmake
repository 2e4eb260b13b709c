# sd_warnings: an interface target every shardd target links privately.
# Warnings apply to C only, so nvcc never sees them.
add_library(sd_warnings INTERFACE)
target_compile_options(sd_warnings INTERFACE
  $<$<COMPILE_LANGUAGE:C>:-Wall -Wextra -Wshadow -Wstrict-prototypes
    -Wmissing-prototypes -Wformat=2 -Wvla -Wpointer-arith -Wundef
    -Wwrite-strings -Wdeclaration-after-statement -Wno-unused-parameter>)
if(SHARDD_WERROR)
  target_compile_options(sd_warnings INTERFACE $<$<COMPILE_LANGUAGE:C>:-Werror>)
endif()

if(SHARDD_SANITIZE)
  string(REPLACE ";" "," _sd_san "${SHARDD_SANITIZE}")
  # C only: nvcc does not take these flags (sanitizer builds of CUDA code
  # are not supported; configure them with SHARDD_CUDA=OFF).
  add_compile_options($<$<COMPILE_LANGUAGE:C>:-fsanitize=${_sd_san}>
                      $<$<COMPILE_LANGUAGE:C>:-fno-omit-frame-pointer>
                      $<$<COMPILE_LANGUAGE:C>:-fno-sanitize-recover=all>)
  add_link_options(-fsanitize=${_sd_san})
endif()
