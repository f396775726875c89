# What `cmake --install` puts in place, and the Debian package CPack makes of it: the libraries
# with their headers, libsjkv.so (the C interface), the three tools, the trained
# tables, a CMake package (find_package(sjkv CONFIG)) and pkg-config files.
include(CMakePackageConfigHelpers)
set(SJKV_INSTALL_CMAKEDIR "${CMAKE_INSTALL_LIBDIR}/cmake/sjkv")
set(SJKV_INSTALL_DATADIR "${CMAKE_INSTALL_DATADIR}/sjkv")

# Every library with a public header set: the codec, the files, the C interface, the replay,
# training and cluster libraries, the device switch, and the CUDA kernels where they were built.
set(SJKV_INSTALL_LIBS sjkv_codec sjkv_snapshot sjkv_c sjkv_replay sjkv_train sjkv_cluster sjkv_device)
if(TARGET sjkv_kernels)
  list(APPEND SJKV_INSTALL_LIBS sjkv_kernels)
endif()
# sjkv::codec, sjkv::replay, ...: the names the build tree's aliases use.
foreach(lib IN LISTS SJKV_INSTALL_LIBS)
  string(REGEX REPLACE "^sjkv_" "" name ${lib})
  set_target_properties(${lib} PROPERTIES EXPORT_NAME ${name})
endforeach()
# What the package's config must find for their link interfaces (configure_package_config_file).
set(SJKV_CONFIG_MPI ${SJKV_WITH_MPI})
if(TARGET sjkv_kernels OR SJKV_TRAIN_CURAND)
  set(SJKV_CONFIG_CUDA TRUE)
else()
  set(SJKV_CONFIG_CUDA FALSE)
endif()
install(TARGETS ${SJKV_INSTALL_LIBS} sjkv_warnings sjkv_hdf5 ${SJKV_ZSTD_EXPORT}
        EXPORT sjkvTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT dev
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT runtime
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY codec/include/ snapshot/include/ capi/include/ replay/include/ train/include/ cluster/include/
                  kernels/include/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} COMPONENT dev)
install(EXPORT sjkvTargets NAMESPACE sjkv:: DESTINATION ${SJKV_INSTALL_CMAKEDIR} COMPONENT dev)
configure_package_config_file(cmake/sjkvConfig.cmake.in "${CMAKE_CURRENT_BINARY_DIR}/sjkvConfig.cmake"
                              INSTALL_DESTINATION ${SJKV_INSTALL_CMAKEDIR} PATH_VARS SJKV_INSTALL_DATADIR)
write_basic_package_version_file("${CMAKE_CURRENT_BINARY_DIR}/sjkvConfigVersion.cmake" COMPATIBILITY SameMinorVersion)
install(FILES "${CMAKE_CURRENT_BINARY_DIR}/sjkvConfig.cmake" "${CMAKE_CURRENT_BINARY_DIR}/sjkvConfigVersion.cmake"
        DESTINATION ${SJKV_INSTALL_CMAKEDIR} COMPONENT dev)
# pkg-config files find their prefix from where they lie (${pcfiledir}), so one file serves a
# `cmake --install --prefix` anywhere and the Debian package's /usr alike.
string(REGEX REPLACE "[^/]+" ".." SJKV_PC_UP "${CMAKE_INSTALL_LIBDIR}/pkgconfig")
foreach(pc sjkv sjkv-codec)
  configure_file(cmake/${pc}.pc.in "${CMAKE_CURRENT_BINARY_DIR}/${pc}.pc" @ONLY)
  install(FILES "${CMAKE_CURRENT_BINARY_DIR}/${pc}.pc" DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig COMPONENT dev)
endforeach()
if(SJKV_BUILD_TOOLS)
  install(TARGETS sjkv-train sjkv-encode sjkv-replay RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT runtime)
endif()
install(DIRECTORY data/codebooks data/tablesets DESTINATION ${SJKV_INSTALL_DATADIR} COMPONENT runtime)

# cpack -G DEB: one package, sjkv_VERSION_ARCH.deb, its library dependencies found by
# dpkg-shlibdeps, the headers and CMake files beside the libraries and tools.
set(CPACK_PACKAGE_NAME sjkv)
set(CPACK_PACKAGE_VENDOR "sjkv")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "SJ-KVaRN compressed KV cache: codec, C interface and tools")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_GENERATOR DEB)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_MAINTAINER "sjkv developers")
set(CPACK_DEBIAN_PACKAGE_SECTION libdevel)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_DEPENDS "libhdf5-dev, libzstd-dev, nlohmann-json3-dev")
if(SJKV_ZSTD_FROM_PKGCONFIG)
  string(APPEND CPACK_DEBIAN_PACKAGE_DEPENDS ", pkgconf | pkg-config")  # the config finds zstd with it
endif()
if(SJKV_WITH_MPI)
  string(APPEND CPACK_DEBIAN_PACKAGE_DEPENDS ", libopenmpi-dev")  # sjkv::cluster links MPI::MPI_CXX
endif()
set(CPACK_COMPONENTS_ALL runtime dev)
set(CPACK_DEB_COMPONENT_INSTALL OFF)
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
include(CPack)
