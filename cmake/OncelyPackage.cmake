# Debian packages from the install rules: `cpack -G DEB` in the build directory writes
#   oncely_<version>-1_<arch>.deb         the CLI, the systemd unit (runtime component)
#   liboncely-dev_<version>-1_<arch>.deb  library, headers, CMake package (dev component)
# Two packages because a worker machine (or the Docker image) needs neither headers nor the
# -dev packages they pull in, while a C++ user needs both. Install with
#   apt install ./oncely_*.deb ./liboncely-dev_*.deb
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME oncely)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "${PROJECT_DESCRIPTION}")
set(CPACK_PACKAGE_CONTACT "oncely developers <noreply@oncely.invalid>")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_STRIP_FILES ON)

set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_COMPONENTS_ALL runtime dev)
set(CPACK_COMPONENT_DEV_DEPENDS runtime)  # the exported targets name the installed CLI too
set(CPACK_DEBIAN_ENABLE_COMPONENT_DEPENDS ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_RELEASE 1)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)

set(CPACK_DEBIAN_RUNTIME_PACKAGE_NAME oncely)
set(CPACK_DEBIAN_RUNTIME_PACKAGE_SECTION admin)
set(CPACK_COMPONENT_RUNTIME_DESCRIPTION
  "${PROJECT_DESCRIPTION}: command line and worker service\n oncely runs background jobs stored in PostgreSQL, each handler inside the\n transaction that claims its job. This package holds the oncely command\n (migrate, enqueue, worker, dlq, stats) and the oncely-worker systemd unit.")
# The shared libraries the binary links (libpqxx, libcurl, ...) come from dpkg-shlibdeps;
# passwd for useradd in postinst.
set(CPACK_DEBIAN_RUNTIME_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_RUNTIME_PACKAGE_DEPENDS "passwd")
set(CPACK_DEBIAN_RUNTIME_PACKAGE_CONTROL_EXTRA
  "${PROJECT_SOURCE_DIR}/packaging/debian/postinst;${PROJECT_SOURCE_DIR}/packaging/debian/prerm;${PROJECT_SOURCE_DIR}/packaging/debian/postrm")

set(CPACK_DEBIAN_DEV_PACKAGE_NAME liboncely-dev)
set(CPACK_DEBIAN_DEV_PACKAGE_SECTION libdevel)
set(CPACK_COMPONENT_DEV_DESCRIPTION
  "${PROJECT_DESCRIPTION}: C++ library and headers\n The static library, public headers and CMake package of oncely:\n find_package(oncely) and link oncely::oncely.")
# A static library: its users link what it links, so the -dev packages its CMake package
# looks for (cmake/oncelyConfig.cmake.in) are dependencies of this one.
set(CPACK_DEBIAN_DEV_PACKAGE_DEPENDS
  "libpqxx-dev (>= 6.4), libpq-dev, nlohmann-json3-dev (>= 3.10), libspdlog-dev (>= 1:1.10), libcurl4-openssl-dev | libcurl-dev, prometheus-cpp-dev, libcpp-httplib-dev, libhowardhinnant-date-dev, pkg-config")

include(CPack)
