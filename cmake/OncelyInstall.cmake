# Install rules: the library, its public headers, the CLI, and a CMake package so that a
# C++ user writes find_package(oncely) and links oncely::oncely.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

install(TARGETS oncely oncely_cli
  EXPORT oncelyTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/oncely DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})

set(config_dir ${CMAKE_INSTALL_LIBDIR}/cmake/oncely)
install(EXPORT oncelyTargets NAMESPACE oncely:: DESTINATION ${config_dir})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/oncelyConfig.cmake.in
  ${PROJECT_BINARY_DIR}/oncelyConfig.cmake INSTALL_DESTINATION ${config_dir})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/oncelyConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/oncelyConfig.cmake ${PROJECT_BINARY_DIR}/oncelyConfigVersion.cmake
  DESTINATION ${config_dir})
