#!/usr/bin/env python3
"""Compile files into a C source file: a schema's SQL migrations, or the
static files a service serves (the operator console).

    python3 embed.py <schema> <major> <output.c> <input.sql>...

Writes a file that includes "migrate.h" and defines

    const struct migration migrations_<schema>[] = {
        {"001_x.sql", "...", <major>, NULL}, ...,
        {"0.9.0", "...", <major>, adopts_0_9_0}, ...};
    const size_t migrations_<schema>_count = N;

The numbered inputs (NNN_name.sql) are migrations, in the order of their
names, which is the order they are applied in; each is named by its file's
basename, the version recorded in <schema>.schema_migrations. Names must be
unique and sort without ambiguity (three digits, then a name). An input
named adopt-<release>.sql adopts a schema made by that earlier release: its
lines "-- @adopts <version>" name the versions that release recorded, its
SQL brings such a schema to the state the migrations up to the one named by
"-- @up-to <version>" make, and it is placed right after that one
(src/lib/pg/migrate.c).
<major> is the schema's major version the migrations bring a database to.

    python3 embed.py --files <name> <header.h> <output.c> <input>...

Writes a file that includes <header.h> (which declares struct
embedded_file) and defines

    const struct embedded_file <name>_files[] = {
        {"index.html", "...", <length>, "\"<etag>\""}, ...};
    const size_t <name>_files_count = N;

the etag being the first 16 hex digits of the file's SHA-256, quoted as
an HTTP entity tag. Standard library only: it runs at build time.
"""

import hashlib
import os
import re
import sys

# Printable ASCII that may stand for itself inside a C string literal. '?' is
# left out so that no "??x" trigraph can form; '"' and '\\' need escaping.
_PLAIN = frozenset(
    c for c in range(0x20, 0x7F) if c not in (ord('"'), ord("\\"), ord("?"))
)
_NAMED = {
    ord('"'): '\\"',
    ord("\\"): "\\\\",
    ord("?"): "\\?",
    ord("\t"): "\\t",
    ord("\n"): "\\n",
    ord("\r"): "\\r",
}


def c_literal(data):
    """One C string literal for bytes without NUL (no line breaks in it)."""
    out = ['"']
    for b in data:
        if b in _PLAIN:
            out.append(chr(b))
        elif b in _NAMED:
            out.append(_NAMED[b])
        else:
            # Always three octal digits, so a following digit is not
            # taken as part of the escape.
            out.append("\\%03o" % b)
    out.append('"')
    return "".join(out)


def c_string_lines(data, indent):
    """The bytes as adjacent literals, one per source line, ending each
    with its \\n so the generated file reads like the SQL."""
    if not data:
        return indent + '""'
    lines = data.splitlines(keepends=True)
    return "\n".join(indent + c_literal(line) for line in lines)


def fail(msg):
    sys.stderr.write("embed.py: %s\n" % msg)
    sys.exit(1)


def read_inputs(inputs):
    """(basename, bytes) of each input, refusing a NUL byte or a name seen
    twice (a name is the key a file is found by)."""
    seen = {}
    entries = []
    for path in inputs:
        name = os.path.basename(path)
        if name in seen:
            # For migrations the name is the version key: two files of one
            # name would make the second look applied as soon as the first is.
            fail("%s and %s have the same name %s" % (seen[name], path, name))
        seen[name] = path
        with open(path, "rb") as f:
            data = f.read()
        if b"\0" in data:
            fail("%s contains a NUL byte" % path)
        entries.append((name, data))
    return entries


MIGRATION_NAME = re.compile(r"[0-9]{3}_[a-z0-9_]+\.sql")
ADOPT_NAME = re.compile(r"adopt-([0-9]+\.[0-9]+\.[0-9]+)\.sql")
ADOPTS_LINE = re.compile(rb"^-- @adopts (\S+)\s*$", re.M)
UP_TO_LINE = re.compile(rb"^-- @up-to (\S+)\s*$", re.M)


def migrations_source(schema, major, entries):
    migrations = []
    adoptions = []
    for name, data in entries:
        m = ADOPT_NAME.fullmatch(name)
        if m:
            versions = [v.decode("utf-8") for v in ADOPTS_LINE.findall(data)]
            if not versions:
                fail("%s names no version (-- @adopts <version>)" % name)
            up_to = UP_TO_LINE.findall(data)
            if len(up_to) != 1:
                fail("%s must name once the last migration whose state it brings "
                     "(-- @up-to <version>)" % name)
            adoptions.append((m.group(1), data, versions, up_to[0].decode("utf-8")))
        elif MIGRATION_NAME.fullmatch(name):
            migrations.append((name, data))
        else:
            fail("%s: a migration is named NNN_name.sql (lower case), an adoption "
                 "adopt-X.Y.Z.sql" % name)
    # The order is the names' order: nothing else (not the build file)
    # decides it.
    migrations.sort()
    ours = set(name for name, _ in migrations)
    for release, _, versions, up_to in adoptions:
        clash = ours.intersection(versions)
        if clash:
            # A version both adopted and ours could not tell the two apart.
            fail("adopt-%s.sql adopts %s, also a migration of this release" %
                 (release, ", ".join(sorted(clash))))
        if up_to not in ours:
            fail("adopt-%s.sql: @up-to %s is not a migration" % (release, up_to))

    # An adoption comes right after the last migration whose state it
    # brings: migrate.c records the migrations before it as applied.
    ordered = []
    for name, data in migrations:
        ordered.append((name, data, None))
        for i, (release, adata, _, up_to) in enumerate(adoptions):
            if up_to == name:
                ordered.append((release, adata, i))

    out = []
    out.append("/* Generated by sql/embed.py; do not edit: edit the .sql files. */\n")
    out.append('#include "migrate.h"\n\n')
    for i, (release, _, versions, _) in enumerate(adoptions):
        out.append("static const char *const adopts_%d[] = {\n" % i)
        for v in versions:
            out.append("\t%s,\n" % c_literal(v.encode("utf-8")))
        out.append("\tNULL,\n};\n\n")
    out.append("const struct migration migrations_%s[] = {\n" % schema)
    for name, data, adoption in ordered:
        out.append("\t{\n")
        out.append("\t\t%s,\n" % c_literal(name.encode("utf-8")))
        out.append(c_string_lines(data, "\t\t") + ",\n")
        out.append("\t\t%d,\n" % major)
        out.append("\t\t%s,\n" % ("NULL" if adoption is None else "adopts_%d" % adoption))
        out.append("\t},\n")
    out.append("};\n\n")
    out.append("const size_t migrations_%s_count = %d;\n" % (schema, len(ordered)))
    return out


def files_source(name, header, entries):
    out = []
    out.append("/* Generated by sql/embed.py; do not edit: edit the embedded files. */\n")
    out.append("#include %s\n\n" % c_literal(header.encode("utf-8")))
    out.append("const struct embedded_file %s_files[] = {\n" % name)
    for fname, data in entries:
        etag = '"%s"' % hashlib.sha256(data).hexdigest()[:16]
        out.append("\t{\n")
        out.append("\t\t%s,\n" % c_literal(fname.encode("utf-8")))
        out.append(c_string_lines(data, "\t\t") + ",\n")
        out.append("\t\t%d,\n" % len(data))
        out.append("\t\t%s,\n" % c_literal(etag.encode("ascii")))
        out.append("\t},\n")
    out.append("};\n\n")
    out.append("const size_t %s_files_count = %d;\n" % (name, len(entries)))
    return out


def main(argv):
    if len(argv) >= 2 and argv[1] == "--files":
        if len(argv) < 6:
            fail("usage: embed.py --files <name> <header.h> <output.c> <input>...")
        name, header, output, inputs = argv[2], argv[3], argv[4], argv[5:]
        if not re.fullmatch(r"[a-z_][a-z0-9_]*", name):
            fail("name %r is not a lower-case C identifier" % name)
        out = files_source(name, header, read_inputs(inputs))
    else:
        if len(argv) < 5:
            fail("usage: embed.py <schema> <major> <output.c> <input.sql>...")
        schema, major, output, inputs = argv[1], argv[2], argv[3], argv[4:]
        if not re.fullmatch(r"[a-z_][a-z0-9_]*", schema):
            fail("schema %r is not a lower-case C identifier" % schema)
        if not re.fullmatch(r"[0-9]+", major):
            fail("major version %r is not a number" % major)
        out = migrations_source(schema, int(major), read_inputs(inputs))

    # Write beside and rename, so an interrupted build leaves no half file
    # that looks up to date.
    tmp = output + ".tmp"
    with open(tmp, "w", encoding="ascii", newline="\n") as f:
        f.write("".join(out))
    os.replace(tmp, output)


if __name__ == "__main__":
    main(sys.argv)
