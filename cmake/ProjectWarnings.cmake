# fp8s_project_options(target): warnings (and -Werror with FP8S_WERROR) for the project's own targets.
function(fp8s_project_options target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wno-unused-parameter)
  if(FP8S_WERROR)
    target_compile_options(${target} PRIVATE -Werror)
  endif()
endfunction()
