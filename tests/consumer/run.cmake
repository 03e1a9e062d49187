# ctest driver: install vkgate from BUILD_DIR into a fresh prefix, then build
# and run tests/consumer against it (MODE=install), or build the consumer
# with add_subdirectory of SOURCE_DIR (MODE=subdirectory).
set(work ${WORK_DIR}/${MODE})
file(REMOVE_RECURSE ${work})
file(MAKE_DIRECTORY ${work})

function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed (${rc}): ${ARGN}")
  endif()
endfunction()

if(MODE STREQUAL "install")
  run(${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${work}/prefix)
  set(args -DCMAKE_PREFIX_PATH=${work}/prefix -DCMAKE_BUILD_TYPE=Release)
else()
  # The whole library compiles again here: without optimization or debug info
  # (Debug with -O0 alone), which tests the packaging as well in a fraction of
  # a Release build's time, and with BUILD_DIR's shaders (compiling them again
  # took most of this test's eight minutes on two cores).
  set(args -DVKGATE_SOURCE_DIR=${SOURCE_DIR} -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG=-O0
           -DVKGATE_SHADERS_FROM=${BUILD_DIR}/shaders)
endif()
run(${CMAKE_COMMAND} -S ${SOURCE_DIR}/tests/consumer -B ${work}/build -G ${GENERATOR} ${args})
run(${CMAKE_COMMAND} --build ${work}/build --parallel)
set(ENV{VKGATE_VALIDATION} 1)
run(${work}/build/consumer)
