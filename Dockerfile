# oncely's worker in a container: builds the Debian packages on Debian 12 and installs the
# runtime one into debian:12-slim, so the image holds the same files, dependencies and
# non-root `oncely` user (created by the package's postinst) as a machine that installed it.
#
#   docker build -t oncely .
#   docker run --rm -e DATABASE_URL=... oncely migrate
#   docker run --rm -e DATABASE_URL=... -v ./worker.json:/etc/oncely/worker.json:ro oncely
#
# docker-compose.yml runs it next to PostgreSQL.

FROM debian:12 AS build
# Build tools and the -dev packages of Debian 12 (scripts/deps.sh's list without the
# PostgreSQL server the tests use), plus dpkg-dev and file, which cpack's dependency scan runs.
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      cmake g++ make pkg-config dpkg-dev file \
      libpqxx-dev nlohmann-json3-dev libcli11-dev libspdlog-dev libfmt-dev \
      libcurl4-openssl-dev prometheus-cpp-dev libcpp-httplib-dev libhowardhinnant-date-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY CMakeLists.txt ./
COPY cmake cmake
COPY include include
COPY src src
COPY migrations migrations
COPY packaging packaging
COPY examples/demo/worker.json examples/demo/worker.json
RUN cmake -S . -B build -DCMAKE_BUILD_TYPE=Release \
      -DONCELY_BUILD_TESTS=OFF -DONCELY_BUILD_EXAMPLES=OFF -DONCELY_BUILD_BENCH=OFF \
 && cmake --build build -j"$(nproc)" \
 && cd build && cpack -G DEB

FROM debian:12-slim
COPY --from=build /src/build/oncely_*.deb /tmp/
# apt resolves the package's Depends (libpqxx, libcurl, ... from Debian 12); its postinst
# creates the oncely system user and /etc/oncely/worker.env (unused here: pass the
# environment to the container instead).
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends /tmp/oncely_*.deb \
 && rm -rf /var/lib/apt/lists/* /tmp/oncely_*.deb
USER oncely
ENTRYPOINT ["/usr/bin/oncely"]
CMD ["worker", "--config", "/etc/oncely/worker.json"]
