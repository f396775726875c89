# What `cmake --install` puts in place, and the Debian package CPack makes of it: the codec and
# file libraries with their headers, libsjkv.so (the C interface), the three tools, the trained
# tables, a CMake package (find_package(sjkv CONFIG)) and pkg-config files.
include(CMakePackageConfigHelpers)
set(SJKV_INSTALL_CMAKEDIR "${CMAKE_INSTALL_LIBDIR}/cmake/sjkv")
set(SJKV_INSTALL_DATADIR "${CMAKE_INSTALL_DATADIR}/sjkv")

install(TARGETS sjkv_codec sjkv_snapshot sjkv_c sjkv_warnings sjkv_hdf5 ${SJKV_ZSTD_EXPORT}
        EXPORT sjkvTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT dev
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT runtime
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY codec/include/ snapshot/include/ capi/include/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} COMPONENT dev)
install(EXPORT sjkvTargets NAMESPACE sjkv:: DESTINATION ${SJKV_INSTALL_CMAKEDIR} COMPONENT dev)
if(TARGET PkgConfig::SJKV_ZSTD)
  set(SJKV_ZSTD_FROM_PKGCONFIG TRUE)
else()
  set(SJKV_ZSTD_FROM_PKGCONFIG FALSE)
endif()
configure_package_config_file(cmake/sjkvConfig.cmake.in "${CMAKE_CURRENT_BINARY_DIR}/sjkvConfig.cmake"
                              INSTALL_DESTINATION ${SJKV_INSTALL_CMAKEDIR} PATH_VARS SJKV_INSTALL_DATADIR)
write_basic_package_version_file("${CMAKE_CURRENT_BINARY_DIR}/sjkvConfigVersion.cmake" COMPATIBILITY SameMinorVersion)
install(FILES "${CMAKE_CURRENT_BINARY_DIR}/sjkvConfig.cmake" "${CMAKE_CURRENT_BINARY_DIR}/sjkvConfigVersion.cmake"
        DESTINATION ${SJKV_INSTALL_CMAKEDIR} COMPONENT dev)
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
set(CPACK_COMPONENTS_ALL runtime dev)
set(CPACK_DEB_COMPONENT_INSTALL OFF)
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
include(CPack)
