# Install rules: the library, its public headers, the CLI, and a CMake package so that a
# C++ user writes find_package(oncely) and links oncely::oncely. Two components, which the
# Debian packages follow (cmake/OncelyPackage.cmake): `runtime` (the CLI and its systemd
# unit: what a machine that runs workers needs) and `dev` (library, headers, CMake package).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

install(TARGETS oncely oncely_cli
  EXPORT oncelyTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT dev
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT dev
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT runtime
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
# CPACK_STRIP_FILES strips executables only; a static library keeps its debug information
# unless told, which makes it (and the package) about five times larger. Debian's own
# packaging strips static libraries the same way (strip --strip-debug).
install(CODE "
  if(CMAKE_INSTALL_DO_STRIP)
    execute_process(COMMAND \"${CMAKE_STRIP}\" --strip-debug
      \"\$ENV{DESTDIR}\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_LIBDIR}/$<TARGET_FILE_NAME:oncely>\"
      COMMAND_ERROR_IS_FATAL ANY)
  endif()" COMPONENT dev)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/oncely DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} COMPONENT dev)

set(config_dir ${CMAKE_INSTALL_LIBDIR}/cmake/oncely)
install(EXPORT oncelyTargets NAMESPACE oncely:: DESTINATION ${config_dir} COMPONENT dev)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/oncelyConfig.cmake.in
  ${PROJECT_BINARY_DIR}/oncelyConfig.cmake INSTALL_DESTINATION ${config_dir})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/oncelyConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/oncelyConfig.cmake ${PROJECT_BINARY_DIR}/oncelyConfigVersion.cmake
  DESTINATION ${config_dir} COMPONENT dev)

# The worker as a service. The migrations need no files: they are compiled into the binary.
# /etc/oncely/worker.env is not installed here but created by the package's postinst from
# this template, so that its owner and mode (root:oncely 0640) are right and an
# administrator's edits survive upgrades.
install(FILES ${PROJECT_SOURCE_DIR}/packaging/oncely-worker.service
  DESTINATION lib/systemd/system COMPONENT runtime)
install(FILES ${PROJECT_SOURCE_DIR}/packaging/worker.env
  DESTINATION ${CMAKE_INSTALL_DATADIR}/oncely COMPONENT runtime)
install(FILES ${PROJECT_SOURCE_DIR}/examples/demo/worker.json
  DESTINATION ${CMAKE_INSTALL_DOCDIR}/examples COMPONENT runtime)
