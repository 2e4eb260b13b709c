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
  add_compile_options(-fsanitize=${_sd_san} -fno-omit-frame-pointer
                      -fno-sanitize-recover=all)
  add_link_options(-fsanitize=${_sd_san})
endif()
