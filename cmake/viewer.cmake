# viewer.cmake — the Memory Viewer (`hbm view`), included by CMakeLists.txt when HBM_VIEWER=ON.
#
# Defines the hbm_viewer library: src/viewer/*.c (HTTP server on libmicrohttpd, JSON API with
# jansson) plus the web page, embedded in the binary so the page loads nothing from the
# network. The page is built from web/ at build time:
#   1. scripts/web-deps.sh runs `npm ci` in web/ (once, and again when package-lock.json
#      changes) to install uPlot (the charting library) and esbuild (the bundler);
#   2. esbuild bundles web/src/main.js (and the CSS it imports, uPlot's included) into
#      <build>/web/app.js and app.css;
#   3. cmake/viewer_embed.cmake turns web/index.html, app.js, app.css and the icon into
#      <build>/viewer_assets.c: byte arrays listed in hbm__assets[] (src/viewer/viewer.h).
find_program(HBM_NODE node)
find_program(HBM_NPM npm)
if(NOT HBM_NODE OR NOT HBM_NPM)
  message(FATAL_ERROR "HBM_VIEWER=ON needs node and npm to bundle the viewer's page, and they "
                      "were not found: run scripts/install-deps.sh (or configure with "
                      "-DHBM_VIEWER=OFF to build without `hbm view`)")
endif()
pkg_check_modules(MHD IMPORTED_TARGET libmicrohttpd)
if(NOT MHD_FOUND)
  message(FATAL_ERROR "HBM_VIEWER=ON needs libmicrohttpd (Debian: libmicrohttpd-dev): run "
                      "scripts/install-deps.sh (or configure with -DHBM_VIEWER=OFF)")
endif()

set(HBM_WEB_DIR ${CMAKE_SOURCE_DIR}/web)
set(HBM_WEB_OUT ${CMAKE_BINARY_DIR}/web)
# npm ci writes node_modules/.package-lock.json: it stands for "installed from this lock".
set(HBM_WEB_STAMP ${HBM_WEB_DIR}/node_modules/.package-lock.json)
add_custom_command(
  OUTPUT ${HBM_WEB_STAMP}
  COMMAND bash ${CMAKE_SOURCE_DIR}/scripts/web-deps.sh
  DEPENDS ${HBM_WEB_DIR}/package.json ${HBM_WEB_DIR}/package-lock.json
  COMMENT "Installing the viewer's npm packages (web/: uPlot, esbuild)"
  VERBATIM)

file(GLOB_RECURSE HBM_WEB_SOURCES CONFIGURE_DEPENDS ${HBM_WEB_DIR}/src/*.js
     ${HBM_WEB_DIR}/src/*.css)
add_custom_command(
  OUTPUT ${HBM_WEB_OUT}/app.js ${HBM_WEB_OUT}/app.css
  COMMAND ${HBM_WEB_DIR}/node_modules/.bin/esbuild ${HBM_WEB_DIR}/src/main.js --bundle --minify
          --target=es2020 --outdir=${HBM_WEB_OUT} --entry-names=app --log-level=warning
  DEPENDS ${HBM_WEB_SOURCES} ${HBM_WEB_STAMP}
  COMMENT "Bundling the viewer's page with esbuild"
  VERBATIM)

add_custom_command(
  OUTPUT ${CMAKE_BINARY_DIR}/viewer_assets.c
  COMMAND ${CMAKE_COMMAND} -DOUT=${CMAKE_BINARY_DIR}/viewer_assets.c
          -DINDEX_HTML=${HBM_WEB_DIR}/index.html -DAPP_JS=${HBM_WEB_OUT}/app.js
          -DAPP_CSS=${HBM_WEB_OUT}/app.css -DFAVICON=${HBM_WEB_DIR}/favicon.svg
          -P ${CMAKE_SOURCE_DIR}/cmake/viewer_embed.cmake
  DEPENDS ${HBM_WEB_DIR}/index.html ${HBM_WEB_DIR}/favicon.svg ${HBM_WEB_OUT}/app.js
          ${HBM_WEB_OUT}/app.css ${CMAKE_SOURCE_DIR}/cmake/viewer_embed.cmake
  COMMENT "Embedding the viewer's page"
  VERBATIM)

file(GLOB HBM_VIEWER_SRCS CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/viewer/*.c)
add_library(hbm_viewer STATIC ${HBM_VIEWER_SRCS} ${CMAKE_BINARY_DIR}/viewer_assets.c)
target_include_directories(hbm_viewer PUBLIC ${CMAKE_SOURCE_DIR}/include ${CMAKE_SOURCE_DIR}/src)
target_link_libraries(hbm_viewer PUBLIC hbm_import hbm_hlo hbm_profile hbm_base PkgConfig::MHD
                      PkgConfig::JANSSON Threads::Threads)
