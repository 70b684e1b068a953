/*
 * version: what this build is. The version is meson.build's
 * project(version:), the one place it is set; the commit comes from git at
 * build time, or from the COMMIT file of a `meson dist` tarball
 * (scripts/commit-id), and is "unknown" when neither is there.
 */
#ifndef PGSAGA_VERSION_H
#define PGSAGA_VERSION_H

#include <stdio.h>

extern const char pgsaga_version[]; /* "1.0.0" */
extern const char pgsaga_commit[];  /* 7 to 40 hex digits, or "unknown" */

/* Prints the one line of --version: "pgsaga 1.0.0 (commit 1a2b3c4d5e6f)". */
void version_print(FILE *out);

#endif
