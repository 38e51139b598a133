# Install rules: the static and shared libraries, the public headers, a
# pkg-config file and a CMake package, so that other programs can use an
# installed libemu in either of the two usual ways:
#
#   cc prog.c $(pkg-config --cflags --libs libemu)
#
#   find_package(libemu 0.1 REQUIRED)
#   target_link_libraries(prog PRIVATE libemu::emu)
#
# Included from the top CMakeLists.txt after the targets exist; the `emu`
# program installs itself from cli/CMakeLists.txt.  tests/install_check.sh
# installs into a temporary prefix and builds examples/consumer both ways.
include(CMakePackageConfigHelpers)

set(EMU_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/libemu
    CACHE STRING "Where libemuConfig.cmake is installed, relative to the prefix")

# Exported as libemu::emu_static and libemu::emu_shared; libemuConfig.cmake
# adds libemu::emu, which is one of the two.
set_target_properties(emu_static PROPERTIES EXPORT_NAME emu_static)
set_target_properties(emu_shared PROPERTIES EXPORT_NAME emu_shared)
install(TARGETS emu_static emu_shared
        EXPORT libemuTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
                NAMELINK_COMPONENT Development
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})

install(DIRECTORY ${PROJECT_SOURCE_DIR}/libemu/include/emu
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
        FILES_MATCHING PATTERN "*.h")
install(FILES ${PROJECT_BINARY_DIR}/libemu/include/emu/version.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/emu)

# The libraries' pkg-config dependencies, read from the target so that the
# installed files follow whatever the build links (MPFR, GMP, zlib, OpenBLAS
# if found, ...).  Convention: each PkgConfig::<NAME> comes from
# pkg_check_modules(<NAME> ... IMPORTED_TARGET <name>), NAME being the
# module's name in upper case.
set(EMU_PKG_DEPS "")
get_target_property(_emu_link emu_static INTERFACE_LINK_LIBRARIES)
foreach(_emu_lib IN LISTS _emu_link)
  if(_emu_lib MATCHES "^PkgConfig::(.+)$")
    string(TOLOWER "${CMAKE_MATCH_1}" _emu_module)
    list(APPEND EMU_PKG_DEPS ${_emu_module})
  endif()
endforeach()
# OpenMP (EMU_OPENMP): consumers of the static library need the flag, and
# the CMake package needs OpenMP::OpenMP_C.
set(EMU_NEEDS_OPENMP OFF)
set(EMU_PC_LIBS_PRIVATE "-lm")
if("OpenMP::OpenMP_C" IN_LIST _emu_link)
  set(EMU_NEEDS_OPENMP ON)
  string(APPEND EMU_PC_LIBS_PRIVATE " ${OpenMP_C_FLAGS}")
endif()
unset(_emu_link)
unset(_emu_lib)
unset(_emu_module)
list(JOIN EMU_PKG_DEPS " " EMU_PC_REQUIRES_PRIVATE)

# pkg-config: the prefix is found from the .pc file's own place, so the
# installed tree can be moved (cmake --install --prefix, DESTDIR, a
# package manager) without editing it.
if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}")
  set(EMU_PC_PREFIX "${CMAKE_INSTALL_PREFIX}")
  set(EMU_PC_LIBDIR "${CMAKE_INSTALL_LIBDIR}")
else()
  file(RELATIVE_PATH EMU_PC_UP "/root/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/root")
  string(REGEX REPLACE "/$" "" EMU_PC_UP "${EMU_PC_UP}")
  set(EMU_PC_PREFIX "\${pcfiledir}/${EMU_PC_UP}")
  set(EMU_PC_LIBDIR "\${prefix}/${CMAKE_INSTALL_LIBDIR}")
endif()
if(IS_ABSOLUTE "${CMAKE_INSTALL_INCLUDEDIR}")
  set(EMU_PC_INCLUDEDIR "${CMAKE_INSTALL_INCLUDEDIR}")
else()
  set(EMU_PC_INCLUDEDIR "\${prefix}/${CMAKE_INSTALL_INCLUDEDIR}")
endif()
configure_file(${PROJECT_SOURCE_DIR}/cmake/libemu.pc.in
               ${PROJECT_BINARY_DIR}/libemu.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/libemu.pc
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

# CMake package.
install(EXPORT libemuTargets
        NAMESPACE libemu::
        FILE libemuTargets.cmake
        DESTINATION ${EMU_INSTALL_CMAKEDIR})
configure_package_config_file(
  ${PROJECT_SOURCE_DIR}/cmake/libemuConfig.cmake.in
  ${PROJECT_BINARY_DIR}/libemuConfig.cmake
  INSTALL_DESTINATION ${EMU_INSTALL_CMAKEDIR})
# 0.x: a minor version may break the API, so only the same minor matches.
write_basic_package_version_file(
  ${PROJECT_BINARY_DIR}/libemuConfigVersion.cmake
  VERSION ${PROJECT_VERSION}
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/libemuConfig.cmake
              ${PROJECT_BINARY_DIR}/libemuConfigVersion.cmake
        DESTINATION ${EMU_INSTALL_CMAKEDIR})

# The SystemVerilog declarations of the DPI-C golden model (emu/dpi.h), for
# testbenches: <prefix>/share/emu/emu_dpi.sv.
install(FILES ${PROJECT_SOURCE_DIR}/libemu/dpi/emu_dpi.sv
        DESTINATION ${CMAKE_INSTALL_DATADIR}/emu)

# The Python package (python/emu) into <prefix>/lib/python3/dist-packages,
# which Debian's python3 searches for /usr and /usr/local prefixes
# (another prefix: add the folder to PYTHONPATH).  emu/_install.py
# records where the shared library lies, relative to the package, so
# that an installed `import emu` loads the installed libemu.so (and a
# moved or DESTDIR tree stays consistent).
set(EMU_INSTALL_PYTHONDIR lib/python3/dist-packages
    CACHE STRING "Where the Python package emu is installed, relative to the prefix")
file(RELATIVE_PATH EMU_PY_TO_LIB
     /prefix/${EMU_INSTALL_PYTHONDIR}/emu /prefix/${CMAKE_INSTALL_LIBDIR})
file(GENERATE OUTPUT ${PROJECT_BINARY_DIR}/python/emu/_install.py
     CONTENT "# Written by cmake --install: where the installed libemu.so lies.
import os

LIBRARY = os.path.normpath(os.path.join(
    os.path.dirname(os.path.abspath(__file__)), \"${EMU_PY_TO_LIB}\",
    \"libemu.so.${PROJECT_VERSION_MAJOR}\"))
")
install(DIRECTORY ${PROJECT_SOURCE_DIR}/python/emu
        DESTINATION ${EMU_INSTALL_PYTHONDIR}
        FILES_MATCHING PATTERN "*.py"
        PATTERN "__pycache__" EXCLUDE
        PATTERN "_install.py" EXCLUDE)
install(FILES ${PROJECT_BINARY_DIR}/python/emu/_install.py
        DESTINATION ${EMU_INSTALL_PYTHONDIR}/emu)
