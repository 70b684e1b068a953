"""A validator for the subset of OpenAPI 3.0 schemas that docs/openapi.yaml
uses, and a structural check of the document itself.

Supported: $ref (local, "#/..."), type (object, array, string, integer,
number, boolean), nullable, enum, properties, required,
additionalProperties (boolean), items, minItems, maxItems, minLength,
maxLength, pattern, minimum, maximum, allOf, anyOf, oneOf, and format date-time, uuid
and int64. Annotations (description, example, title, x-*) are ignored. Any
other keyword is an error, so the document cannot use something this
validator would silently skip.
"""

import re

ANNOTATIONS = {"description", "example", "title", "deprecated", "readOnly", "writeOnly"}
KEYWORDS = {"$ref", "type", "nullable", "enum", "properties", "required",
            "additionalProperties", "items", "minItems", "maxItems", "minLength", "maxLength",
            "pattern", "minimum", "maximum", "allOf", "anyOf", "oneOf", "format"}
TYPES = {"object", "array", "string", "integer", "number", "boolean"}
FORMATS = {"date-time", "uuid", "int64"}

RFC3339 = re.compile(
    r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$")
UUID = re.compile(r"^[0-9a-fA-F]{8}-([0-9a-fA-F]{4}-){3}[0-9a-fA-F]{12}$")


class SchemaError(Exception):
    """The document itself is wrong (not the instance)."""


def resolve(doc, ref):
    if not ref.startswith("#/"):
        raise SchemaError("only local $ref supported: " + ref)
    node = doc
    for part in ref[2:].split("/"):
        part = part.replace("~1", "/").replace("~0", "~")
        if not isinstance(node, dict) or part not in node:
            raise SchemaError("unresolved $ref " + ref)
        node = node[part]
    return node


def deref(doc, node):
    seen = set()
    while isinstance(node, dict) and "$ref" in node:
        ref = node["$ref"]
        if ref in seen:
            raise SchemaError("$ref cycle at " + ref)
        seen.add(ref)
        node = resolve(doc, ref)
    return node


def check_schema(doc, schema, where):
    """Raises SchemaError when the schema uses what validate() does not know."""
    if not isinstance(schema, dict):
        raise SchemaError("%s: schema is not an object" % where)
    if "$ref" in schema:
        extra = set(schema) - {"$ref"} - ANNOTATIONS
        if extra:
            raise SchemaError("%s: siblings of $ref are ignored in OpenAPI 3.0: %s"
                              % (where, sorted(extra)))
        resolve(doc, schema["$ref"])
        return
    for k in schema:
        if k in ANNOTATIONS or k.startswith("x-"):
            continue
        if k not in KEYWORDS:
            raise SchemaError("%s: unsupported keyword %r" % (where, k))
    if "type" in schema and schema["type"] not in TYPES:
        raise SchemaError("%s: unknown type %r" % (where, schema["type"]))
    if "format" in schema and schema["format"] not in FORMATS:
        raise SchemaError("%s: unknown format %r" % (where, schema["format"]))
    if "pattern" in schema:
        re.compile(schema["pattern"])
    if "additionalProperties" in schema and not isinstance(schema["additionalProperties"], bool):
        raise SchemaError("%s: additionalProperties must be a boolean here" % where)
    for k, sub in (schema.get("properties") or {}).items():
        check_schema(doc, sub, "%s.properties.%s" % (where, k))
    if "items" in schema:
        check_schema(doc, schema["items"], where + ".items")
    for comb in ("allOf", "anyOf", "oneOf"):
        for i, sub in enumerate(schema.get(comb, [])):
            check_schema(doc, sub, "%s.%s[%d]" % (where, comb, i))


def _type_ok(t, v):
    if t == "object":
        return isinstance(v, dict)
    if t == "array":
        return isinstance(v, list)
    if t == "string":
        return isinstance(v, str)
    if t == "boolean":
        return isinstance(v, bool)
    if t == "integer":
        return isinstance(v, int) and not isinstance(v, bool)
    if t == "number":
        return isinstance(v, (int, float)) and not isinstance(v, bool)
    return False


def validate(doc, schema, v, path="$"):
    """Returns a list of error strings (empty when v is valid)."""
    schema = deref(doc, schema)
    errs = []
    if v is None:
        if schema.get("nullable"):
            return []
        # a schema with no type and no combinators accepts anything
        if "type" in schema or "enum" in schema:
            return ["%s: null not allowed" % path]
    if "type" in schema and not _type_ok(schema["type"], v):
        return ["%s: expected %s, got %s" % (path, schema["type"], type(v).__name__)]
    if "enum" in schema and not any(v == e and type(v) is type(e) for e in schema["enum"]):
        errs.append("%s: %r not in %r" % (path, v, schema["enum"]))
    if isinstance(v, str):
        if "minLength" in schema and len(v) < schema["minLength"]:
            errs.append("%s: shorter than %d" % (path, schema["minLength"]))
        if "maxLength" in schema and len(v) > schema["maxLength"]:
            errs.append("%s: longer than %d" % (path, schema["maxLength"]))
        if "pattern" in schema and not re.search(schema["pattern"], v):
            errs.append("%s: %r does not match %s" % (path, v, schema["pattern"]))
        fmt = schema.get("format")
        if fmt == "date-time" and not RFC3339.match(v):
            errs.append("%s: %r is not an RFC 3339 date-time" % (path, v))
        if fmt == "uuid" and not UUID.match(v):
            errs.append("%s: %r is not a UUID" % (path, v))
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        if "minimum" in schema and v < schema["minimum"]:
            errs.append("%s: %r < %r" % (path, v, schema["minimum"]))
        if "maximum" in schema and v > schema["maximum"]:
            errs.append("%s: %r > %r" % (path, v, schema["maximum"]))
        if schema.get("format") == "int64" and isinstance(v, int) and not (
                -2**63 <= v < 2**63):
            errs.append("%s: %r outside int64" % (path, v))
    if isinstance(v, dict):
        props = schema.get("properties", {})
        for k in schema.get("required", []):
            if k not in v:
                errs.append("%s: missing %r" % (path, k))
        for k, sub in v.items():
            if k in props:
                errs += validate(doc, props[k], sub, "%s.%s" % (path, k))
            elif schema.get("additionalProperties") is False:
                errs.append("%s: unexpected property %r" % (path, k))
    if isinstance(v, list):
        if "minItems" in schema and len(v) < schema["minItems"]:
            errs.append("%s: fewer than %d items" % (path, schema["minItems"]))
        if "maxItems" in schema and len(v) > schema["maxItems"]:
            errs.append("%s: more than %d items" % (path, schema["maxItems"]))
        if "items" in schema:
            for i, item in enumerate(v):
                errs += validate(doc, schema["items"], item, "%s[%d]" % (path, i))
    for sub in schema.get("allOf", []):
        errs += validate(doc, sub, v, path)
    if "anyOf" in schema:
        if not any(not validate(doc, sub, v, path) for sub in schema["anyOf"]):
            errs.append("%s: matches none of anyOf" % path)
    if "oneOf" in schema:
        n = sum(1 for sub in schema["oneOf"] if not validate(doc, sub, v, path))
        if n != 1:
            errs.append("%s: matches %d of oneOf, not exactly 1" % (path, n))
    return errs


def error_codes(doc, schema):
    """The error codes a response schema allows: the enum at error.code,
    looked for through $ref and allOf. None when it names none."""
    schema = deref(doc, schema)
    found = None
    try:
        code = deref(doc, deref(doc, schema["properties"]["error"])["properties"]["code"])
        if "enum" in code:
            found = set(code["enum"])
    except (KeyError, TypeError):
        pass
    for sub in schema.get("allOf", []):
        sub_codes = error_codes(doc, sub)
        if sub_codes is not None:
            found = sub_codes if found is None else found & sub_codes
    return found


HTTP_METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")


def check_document(doc):
    """Structural checks of the whole document; returns a list of errors."""
    errs = []
    if not str(doc.get("openapi", "")).startswith("3.0."):
        errs.append("openapi: expected 3.0.x, got %r" % doc.get("openapi"))
    for k in ("title", "version"):
        if not (doc.get("info") or {}).get(k):
            errs.append("info.%s missing" % k)
    op_ids = set()

    def schema_at(s, where):
        try:
            check_schema(doc, s, where)
        except SchemaError as e:
            errs.append(str(e))

    for name, s in (doc.get("components", {}).get("schemas") or {}).items():
        schema_at(s, "components.schemas." + name)
    for path, item in (doc.get("paths") or {}).items():
        if not path.startswith("/"):
            errs.append("path %r does not start with /" % path)
        templated = set(re.findall(r"\{([^}]+)\}", path))
        for method in HTTP_METHODS:
            op = item.get(method)
            if op is None:
                continue
            where = "%s %s" % (method.upper(), path)
            oid = op.get("operationId")
            if not oid or oid in op_ids:
                errs.append("%s: operationId missing or repeated" % where)
            op_ids.add(oid)
            declared = set()
            for p in op.get("parameters", []) + item.get("parameters", []):
                try:
                    p = deref(doc, p)
                except SchemaError as e:
                    errs.append("%s: %s" % (where, e))
                    continue
                if p.get("in") == "path":
                    declared.add(p["name"])
                    if not p.get("required"):
                        errs.append("%s: path parameter %s must be required" % (where, p["name"]))
                schema_at(p.get("schema", {}), "%s parameter %s" % (where, p.get("name")))
            if declared != templated:
                errs.append("%s: path parameters %s, template has %s"
                            % (where, sorted(declared), sorted(templated)))
            if "requestBody" in op:
                for mt, media in deref(doc, op["requestBody"]).get("content", {}).items():
                    schema_at(media.get("schema", {}), "%s request %s" % (where, mt))
            responses = op.get("responses") or {}
            if not responses:
                errs.append("%s: no responses" % where)
            for status, resp in responses.items():
                if not re.fullmatch(r"[1-5][0-9][0-9]", str(status)):
                    errs.append("%s: status %r is not a quoted 3-digit code" % (where, status))
                try:
                    resp = deref(doc, resp)
                except SchemaError as e:
                    errs.append("%s %s: %s" % (where, status, e))
                    continue
                if not resp.get("description"):
                    errs.append("%s %s: description missing" % (where, status))
                for mt, media in (resp.get("content") or {}).items():
                    schema_at(media.get("schema", {}), "%s %s %s" % (where, status, mt))
                for hname, h in (resp.get("headers") or {}).items():
                    schema_at(deref(doc, h).get("schema", {}),
                              "%s %s header %s" % (where, status, hname))
            for sec in op.get("security", []):
                for scheme in sec:
                    if scheme not in doc.get("components", {}).get("securitySchemes", {}):
                        errs.append("%s: unknown security scheme %s" % (where, scheme))
    for name, resp in (doc.get("components", {}).get("responses") or {}).items():
        for mt, media in (resp.get("content") or {}).items():
            schema_at(media.get("schema", {}), "components.responses.%s %s" % (name, mt))
    return errs
