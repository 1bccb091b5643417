#!/usr/bin/env python3
"""Validates recorded HTTP exchanges of `idem serve` against docs/openapi.yaml.

The HTTP contract tests record every response they receive when IDEM_HTTP_RECORD_DIR
is set (tests/http/client.h): one JSON line per exchange, in one file per process.
This script checks the document itself, then every record:

  - the request target matches a path template of the document (else the
    document's `x-idem-unrouted` answers apply), and the method is an operation of
    that path (else its `x-idem-other-methods` answers apply, and `Allow` must name
    exactly the methods the document lists for the path);
  - the status code is documented for that operation (an undocumented one fails);
  - the content type is one the response documents, and a response without content
    has an empty body;
  - the body validates against the schema (JSON Schema 2020-12, `$ref`s resolved
    within the document, `format: date-time` enforced); problem+json bodies also
    against components.schemas.Problem;
  - documented response headers: required ones are present, values match their
    schema; the API's own headers (Retry-After, Idempotent-Replayed,
    WWW-Authenticate, Allow) are not sent where the response does not document them;
  - a 2xx of an operation that needs a token answered a request that sent one, and
    a 2xx answered a request body (and path parameters) the document accepts.

It fails (exit 1) listing each mismatch with the file and line of its record, and
also when there are no records at all (so a broken recorder cannot pass silently).
On success it prints "openapi: N responses checked, M operations covered".

Usage:
  openapi_check.py --spec docs/openapi.yaml --records DIR_OR_FILE...
  openapi_check.py --reset DIR        # empty (and create) a record directory

Runs with Debian's python3-jsonschema (4.10) and python3-yaml, and with newer ones.
"""

import argparse
import datetime
import json
import os
import re
import sys
import urllib.parse

import jsonschema
import yaml

HTTP_METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")
# Headers the server sets itself; sending one the response does not document fails.
API_HEADERS = ("retry-after", "idempotent-replayed", "www-authenticate", "allow")
DRAFT_2020_12 = "https://json-schema.org/draft/2020-12/schema"
UNROUTED = "x-idem-unrouted"
CONSOLE = "x-idem-console"
OTHER_METHODS = "x-idem-other-methods"

_RFC3339 = re.compile(
    r"^\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$")


def _make_format_checker():
    checker = jsonschema.FormatChecker()

    # Registered here, not left to jsonschema: without the optional rfc3339-validator
    # package (not in Debian's dependencies) "date-time" would silently pass.
    @checker.checks("date-time", raises=ValueError)
    def _date_time(value):
        if not isinstance(value, str):
            return True
        if not _RFC3339.match(value):
            raise ValueError("not an RFC 3339 date-time")
        # Range checks (month 13, second 61, ...).
        datetime.datetime.fromisoformat(value.upper().replace("Z", "+00:00"))
        return True

    return checker


FORMAT_CHECKER = _make_format_checker()


def _unescape_pointer_token(token):
    return urllib.parse.unquote(token).replace("~1", "/").replace("~0", "~")


def _media_type(value):
    """('type/subtype', {param: value}) of a Content-Type value, lowercased."""
    parts = [p.strip() for p in (value or "").split(";")]
    params = {}
    for p in parts[1:]:
        if "=" in p:
            k, v = p.split("=", 1)
            params[k.strip().lower()] = v.strip().strip('"').lower()
    return parts[0].lower(), params


def _is_json_media(media):
    return media == "application/json" or media.endswith("+json")


def _no_duplicate_keys(pairs):
    seen = {}
    for k, v in pairs:
        if k in seen:
            raise ValueError("duplicate member %r" % k)
        seen[k] = v
    return seen


def _parse_json(text):
    return json.loads(text, object_pairs_hook=_no_duplicate_keys)


def _where(error):
    return "/" + "/".join(str(p) for p in error.absolute_path)


def _describe(error, depth=0):
    """One line for a jsonschema error: where, and why. For oneOf/anyOf, why each
    alternative (named by its $ref) failed."""
    message = error.message
    if len(message) > 200:
        message = message[:200] + "..."
    if not error.context or depth > 2:
        return "%s: %s" % (_where(error), message)
    alternatives = error.schema.get(error.validator) if isinstance(error.schema, dict) else None
    by_alternative = {}
    for sub in error.context:
        index = sub.relative_schema_path[0] if sub.relative_schema_path else 0
        by_alternative.setdefault(index, []).append(sub)
    parts = []
    for index in sorted(by_alternative, key=str):
        name = "#%s" % index
        if isinstance(alternatives, list) and isinstance(index, int) and \
                index < len(alternatives) and isinstance(alternatives[index], dict) and \
                "$ref" in alternatives[index]:
            name = alternatives[index]["$ref"].rsplit("/", 1)[-1]
        subs = sorted(by_alternative[index], key=lambda e: -len(e.absolute_path))[:2]
        parts.append("%s: %s" % (name, "; ".join(_describe(e, depth + 1) for e in subs)))
    return "%s: matches none of the %s alternatives (%s)" % (
        _where(error), error.validator, " | ".join(parts))


class Document:
    """A loaded OpenAPI document: self-checks, $ref resolution, path matching."""

    def __init__(self, doc, name="openapi.yaml"):
        self.doc = doc
        self.name = name
        self._validators = {}

    @classmethod
    def load(cls, path):
        with open(path, encoding="utf-8") as f:
            return cls(yaml.safe_load(f), path)

    # ---- $ref ---------------------------------------------------------------------
    def pointer(self, ref):
        """The object a local "#/..." reference names; KeyError when it names nothing."""
        if not isinstance(ref, str) or not ref.startswith("#"):
            raise KeyError("not a local reference: %r" % (ref,))
        node = self.doc
        fragment = ref[1:]
        if fragment in ("", "/"):
            return node
        if not fragment.startswith("/"):
            raise KeyError("not a JSON pointer: %r" % (ref,))
        for token in fragment[1:].split("/"):
            token = _unescape_pointer_token(token)
            if isinstance(node, dict) and token in node:
                node = node[token]
            elif isinstance(node, list) and token.isdigit() and int(token) < len(node):
                node = node[int(token)]
            else:
                raise KeyError("%s does not resolve (no %r)" % (ref, token))
        return node

    def deref(self, obj):
        """Follows $ref chains of non-schema objects (responses, headers, parameters)."""
        seen = set()
        while isinstance(obj, dict) and "$ref" in obj:
            ref = obj["$ref"]
            if ref in seen:
                raise KeyError("$ref cycle at %s" % ref)
            seen.add(ref)
            obj = self.pointer(ref)
        return obj

    def validator(self, schema):
        # Keyed by identity: the schemas are objects of self.doc, which outlives the cache.
        key = id(schema)
        cached = self._validators.get(key)
        if cached is None:
            # The schema sits under a root that carries the document's components, so
            # "#/components/..." references resolve the same way in jsonschema 4.10
            # (RefResolver) and in later versions (referencing).
            root = {
                "$schema": DRAFT_2020_12,
                "components": self.doc.get("components", {}),
                "allOf": [schema],
            }
            cached = jsonschema.Draft202012Validator(root, format_checker=FORMAT_CHECKER)
            self._validators[key] = cached
        return cached

    def schema_errors(self, schema, instance):
        v = self.validator(schema)
        return sorted(v.iter_errors(instance), key=lambda e: list(e.absolute_path))

    # ---- self-check ---------------------------------------------------------------
    def operations(self):
        """[(path, method, operation)] in document order."""
        out = []
        for path, item in (self.doc.get("paths") or {}).items():
            if not isinstance(item, dict):
                continue
            for method in HTTP_METHODS:
                if method in item:
                    out.append((path, method, item[method]))
        return out

    def problems(self):
        """What is wrong with the document itself, as a list of messages."""
        out = []
        doc = self.doc
        if not isinstance(doc, dict):
            return ["the document is not a YAML mapping"]
        if not str(doc.get("openapi", "")).startswith("3.1."):
            out.append("openapi: must be 3.1.x, got %r" % (doc.get("openapi"),))
        info = doc.get("info")
        if not isinstance(info, dict) or not isinstance(info.get("title"), str) or \
                not isinstance(info.get("version"), str):
            out.append("info: needs string title and version")
        dialect = doc.get("jsonSchemaDialect", DRAFT_2020_12)
        if dialect != DRAFT_2020_12:
            out.append("jsonSchemaDialect: expected %s" % DRAFT_2020_12)

        # Every $ref anywhere resolves.
        def walk(node, where):
            if isinstance(node, dict):
                if "$ref" in node:
                    try:
                        self.pointer(node["$ref"])
                    except KeyError as e:
                        out.append("%s: $ref %s" % (where, e.args[0]))
                for k, v in node.items():
                    walk(v, where + "/" + str(k).replace("~", "~0").replace("/", "~1"))
            elif isinstance(node, list):
                for i, v in enumerate(node):
                    walk(v, "%s/%d" % (where, i))
        walk(doc, "#")

        components = doc.get("components") or {}
        schemes = (components.get("securitySchemes") or {})
        for name, schema in (components.get("schemas") or {}).items():
            out.extend(self._check_schema(schema, "#/components/schemas/" + name))

        def check_security(requirements, where):
            if requirements is None:
                return
            if not isinstance(requirements, list):
                out.append("%s: security must be a list" % where)
                return
            for req in requirements:
                for scheme in (req or {}):
                    if scheme not in schemes:
                        out.append("%s: security scheme %r is not in components" %
                                   (where, scheme))
        check_security(doc.get("security"), "#/security")

        paths = doc.get("paths")
        if not isinstance(paths, dict) or not paths:
            out.append("paths: none")
            paths = {}
        operation_ids = {}
        for path, item in paths.items():
            where = "paths %s" % path
            if not path.startswith("/"):
                out.append("%s: must start with /" % where)
            if not isinstance(item, dict):
                out.append("%s: not a path item" % where)
                continue
            template_params = set(re.findall(r"\{([^}/]+)\}", path))
            methods = [m for m in HTTP_METHODS if m in item]
            if not methods:
                out.append("%s: no operations" % where)
            for method in methods:
                op = item[method]
                owhere = "%s %s" % (method.upper(), path)
                if not isinstance(op, dict):
                    out.append("%s: not an operation" % owhere)
                    continue
                op_id = op.get("operationId")
                if op_id is not None:
                    if op_id in operation_ids:
                        out.append("%s: operationId %r also used by %s" %
                                   (owhere, op_id, operation_ids[op_id]))
                    operation_ids[op_id] = owhere
                check_security(op.get("security"), owhere)
                declared = {}
                for p in list(item.get("parameters") or []) + list(op.get("parameters") or []):
                    try:
                        p = self.deref(p)
                    except KeyError:
                        continue  # reported by walk()
                    if p.get("in") == "path":
                        declared[p.get("name")] = p
                        if p.get("required") is not True:
                            out.append("%s: path parameter %r must be required" %
                                       (owhere, p.get("name")))
                    if "schema" in p:
                        out.extend(self._check_schema(p["schema"], "%s parameter %s" %
                                                      (owhere, p.get("name"))))
                for missing in sorted(template_params - set(declared)):
                    out.append("%s: path parameter {%s} is not declared" % (owhere, missing))
                for extra in sorted(set(declared) - template_params):
                    out.append("%s: parameter %r is not in the path" % (owhere, extra))
                body = op.get("requestBody")
                if body is not None:
                    try:
                        body = self.deref(body)
                    except KeyError:
                        body = {}
                    for media, mt in (body.get("content") or {}).items():
                        if isinstance(mt, dict) and "schema" in mt:
                            out.extend(self._check_schema(
                                mt["schema"], "%s requestBody %s" % (owhere, media)))
                out.extend(self._check_responses(op.get("responses"), owhere))
        for ext in (UNROUTED, OTHER_METHODS):
            if ext not in doc:
                out.append("%s: missing (answers to unrouted targets / other methods)" % ext)
            else:
                out.extend(self._check_responses((doc[ext] or {}).get("responses"), ext))
        if CONSOLE in doc:
            out.extend(self._check_responses((doc[CONSOLE] or {}).get("responses"), CONSOLE))
        return out

    def _check_responses(self, responses, where):
        out = []
        if not isinstance(responses, dict) or not responses:
            return ["%s: no responses" % where]
        for code, response in responses.items():
            rwhere = "%s response %s" % (where, code)
            if not isinstance(code, str) or not re.fullmatch(r"[1-5](\d\d|XX)|default", code):
                out.append("%s: status keys must be quoted strings like '200' or '4XX', got %r"
                           % (rwhere, code))
            try:
                response = self.deref(response)
            except KeyError:
                continue  # reported by walk()
            if not isinstance(response, dict) or not isinstance(response.get("description"), str):
                out.append("%s: needs a description" % rwhere)
                continue
            for name, header in (response.get("headers") or {}).items():
                try:
                    header = self.deref(header)
                except KeyError:
                    continue
                if not isinstance(header, dict) or "schema" not in header:
                    out.append("%s header %s: needs a schema" % (rwhere, name))
                else:
                    out.extend(self._check_schema(header["schema"],
                                                  "%s header %s" % (rwhere, name)))
            for media, mt in (response.get("content") or {}).items():
                if not isinstance(mt, dict) or "schema" not in mt:
                    out.append("%s %s: needs a schema" % (rwhere, media))
                else:
                    out.extend(self._check_schema(mt["schema"], "%s %s" % (rwhere, media)))
        return out

    def _check_schema(self, schema, where):
        try:
            jsonschema.Draft202012Validator.check_schema(schema)
        except jsonschema.exceptions.SchemaError as e:
            return ["%s: not a valid JSON Schema: %s" % (where, e.message)]
        return []

    # ---- matching -----------------------------------------------------------------
    def match(self, path):
        """(template, path_item, {param: raw segment}) for `path`, or None.

        A literal segment must be equal; "{name}" matches one non-empty segment.
        With several matches the one with the most literal segments wins."""
        segments = path.split("/")
        best = None
        for template, item in (self.doc.get("paths") or {}).items():
            tsegs = template.split("/")
            if len(tsegs) != len(segments):
                continue
            params, literals, ok = {}, 0, True
            for t, s in zip(tsegs, segments):
                m = re.fullmatch(r"\{([^}/]+)\}", t)
                if m:
                    if not s:
                        ok = False
                        break
                    params[m.group(1)] = s
                elif t == s:
                    literals += 1
                else:
                    ok = False
                    break
            if ok and (best is None or literals > best[0]):
                best = (literals, template, item, params)
        return None if best is None else best[1:]


class Checker:
    """Checks records against a Document and collects errors and coverage."""

    def __init__(self, document):
        self.d = document
        self.errors = []
        self.checked = 0
        self.operations = set()     # (METHOD, template)
        self.responses = set()      # (METHOD, template, status)

    def check_record(self, rec, where="<record>"):
        self.checked += 1
        label = "%s %s -> %s" % (rec.get("method") or "?", rec.get("target") or "?",
                                 rec.get("status"))
        if rec.get("test"):
            label = "[%s] %s" % (rec["test"], label)
        errors = []
        try:
            self._check(rec, errors)
        except Exception as e:  # a defect of this checker or a malformed record
            errors.append("cannot check: %s: %s" % (type(e).__name__, e))
        for e in errors:
            self.errors.append("%s: %s: %s" % (where, label, e))
        return errors

    def _check(self, rec, errors):
        for field, kind in (("method", str), ("target", str), ("status", int),
                            ("headers", dict), ("body", str)):
            if not isinstance(rec.get(field), kind):
                errors.append("record field %r missing or not a %s" % (field, kind.__name__))
                return
        doc = self.d.doc
        method = rec["method"].lower()
        target = rec["target"]
        status = rec["status"]
        headers = {k.lower(): v for k, v in rec["headers"].items()}
        path = target.split("?", 1)[0]
        matched = self.d.match(path) if path.startswith("/") else None

        op = None
        if (path == "/console" or path.startswith("/console/")) and CONSOLE in doc:
            # The operator console's HTML pages: one set of answers for all of them.
            responses = (doc.get(CONSOLE) or {}).get("responses") or {}
            op_name = "console page %s" % path
            template = "/console/…"
        elif matched is None:
            responses = (doc.get(UNROUTED) or {}).get("responses") or {}
            op_name = "unrouted target %s" % path
            template = None
        else:
            template, item, params = matched
            if method in item:
                op = item[method]
                responses = op.get("responses") or {}
                op_name = "%s %s" % (method.upper(), template)
            else:
                responses = (doc.get(OTHER_METHODS) or {}).get("responses") or {}
                op_name = "%s on %s (a method the path does not serve)" % (
                    rec["method"], template)
                if status == 405:
                    allowed = sorted(m.upper() for m in HTTP_METHODS if m in item)
                    sent = sorted(a.strip().upper()
                                  for a in headers.get("allow", "").split(",") if a.strip())
                    if sent != allowed:
                        errors.append("Allow is %r, the document lists %s for %s" %
                                      (headers.get("allow"), ", ".join(allowed), template))

        code = str(status)
        key = next((k for k in (code, code[0] + "XX", "default") if k in responses), None)
        if key is None:
            errors.append("status %d is not documented for %s (documented: %s)" %
                          (status, op_name, ", ".join(sorted(map(str, responses))) or "none"))
            return
        # Covered: the operation got an answer the document describes.
        if op is not None:
            self.operations.add((method.upper(), template))
        self.responses.add((rec["method"].upper(), template or "(unrouted)", code))
        response = self.d.deref(responses[key])

        self._check_headers(response, headers, errors)
        self._check_content(response, rec, errors)

        if op is not None and 200 <= status < 300:
            self._check_accepted_request(op, item, params, rec, errors)

    def _check_headers(self, response, headers, errors):
        documented = {}
        for name, header in (response.get("headers") or {}).items():
            documented[name.lower()] = self.d.deref(header)
        for name, header in documented.items():
            if name not in headers:
                if header.get("required"):
                    errors.append("required header %s is missing" % name)
                continue
            value = headers[name]
            schema = header.get("schema") or {}
            instance = value
            types = schema.get("type")
            types = types if isinstance(types, list) else [types]
            if "integer" in types or ("const" in schema and isinstance(schema["const"], int)
                                      and not isinstance(schema["const"], bool)):
                if re.fullmatch(r"-?\d+", value):
                    instance = int(value)
            elif "boolean" in types and value in ("true", "false"):
                instance = value == "true"
            for e in self.d.schema_errors(schema, instance):
                errors.append("header %s %r: %s" % (name, value, _describe(e)))
        for name in API_HEADERS:
            if name in headers and name not in documented:
                errors.append("header %s: %r is sent but not documented for this response" %
                              (name, headers[name]))

    def _check_content(self, response, rec, errors):
        content = response.get("content") or {}
        body = rec["body"]
        ctype = rec.get("content_type") or rec["headers"].get("content-type", "")
        if not content:
            if body:
                errors.append("the response documents no content, but a body was sent")
            return
        media, params = _media_type(ctype)
        chosen = None
        for key, mt in content.items():
            kmedia, kparams = _media_type(key)
            if kmedia == media and all(params.get(k) == v for k, v in kparams.items()):
                chosen = mt
                break
        if chosen is None:
            errors.append("content type %r is not documented (documented: %s)" %
                          (ctype, ", ".join(content)))
            return
        schema = chosen.get("schema")
        if _is_json_media(media):
            try:
                instance = _parse_json(body)
            except ValueError as e:
                errors.append("body is not valid JSON (%s): %r" % (e, body[:200]))
                return
        else:
            instance = body
        if schema is not None:
            for e in self.d.schema_errors(schema, instance):
                errors.append("body %s" % _describe(e))
        base = (self.d.doc.get("components") or {}).get("schemas", {}).get("Problem")
        if media == "application/problem+json" and base is not None:
            for e in self.d.schema_errors(base, instance):
                errors.append("body (as RFC 9457 Problem) %s" % _describe(e))
            if isinstance(instance, dict) and instance.get("status") != rec["status"]:
                errors.append("problem status %r differs from the HTTP status %d" %
                              (instance.get("status"), rec["status"]))

    def _check_accepted_request(self, op, item, params, rec, errors):
        # Security: a 2xx of an operation that needs a token must answer one that sent it.
        security = op.get("security", self.d.doc.get("security"))
        if security and all(req for req in security) and not rec.get("authorization", True):
            errors.append("answered 2xx without an Authorization header, but the document "
                          "requires %s" % " or ".join(sorted({k for r in security for k in r})))
        # Path parameters the server accepted must be ones the document accepts.
        declared = {}
        for p in list(item.get("parameters") or []) + list(op.get("parameters") or []):
            p = self.d.deref(p)
            if p.get("in") == "path":
                declared[p["name"]] = p
        for name, raw in params.items():
            p = declared.get(name)
            if p is not None and "schema" in p:
                for e in self.d.schema_errors(p["schema"], urllib.parse.unquote(raw)):
                    errors.append("path parameter %s %r accepted by the server but not by the "
                                  "document: %s" % (name, raw, _describe(e)))
        # The request body the server accepted must be one the document accepts.
        body_spec = op.get("requestBody")
        if body_spec is None or "request_body" not in rec:
            return
        body_spec = self.d.deref(body_spec)
        request_body = rec["request_body"]
        if not request_body.strip():
            if body_spec.get("required"):
                errors.append("answered 2xx to an empty body, but the requestBody is required")
            return
        mt = (body_spec.get("content") or {}).get("application/json")
        if mt is None or "schema" not in mt:
            return
        try:
            instance = _parse_json(request_body)
        except ValueError as e:
            errors.append("answered 2xx to a request body that is not JSON (%s)" % e)
            return
        for e in self.d.schema_errors(mt["schema"], instance):
            errors.append("request body accepted by the server but not by the document: %s" %
                          _describe(e))


def record_files(paths):
    files = []
    for p in paths:
        if os.path.isdir(p):
            files.extend(os.path.join(p, n) for n in sorted(os.listdir(p))
                         if n.endswith(".jsonl"))
        elif os.path.exists(p):
            files.append(p)
    return files


def run(spec_path, record_paths, out=sys.stdout):
    """Checks the document and the records; prints a report; returns the exit status."""
    try:
        document = Document.load(spec_path)
    except (OSError, yaml.YAMLError) as e:
        print("openapi: cannot load %s: %s" % (spec_path, e), file=out)
        return 1
    problems = document.problems()
    if problems:
        for p in problems:
            print("%s: %s" % (spec_path, p), file=out)
        print("openapi: the document has %d problem(s)" % len(problems), file=out)
        return 1

    checker = Checker(document)
    files = record_files(record_paths)
    for path in files:
        with open(path, encoding="utf-8", errors="replace") as f:
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                where = "%s:%d" % (path, n)
                try:
                    rec = json.loads(line)
                except ValueError as e:
                    checker.errors.append("%s: not a JSON record: %s" % (where, e))
                    continue
                if not isinstance(rec, dict):
                    checker.errors.append("%s: not a JSON object" % where)
                    continue
                checker.check_record(rec, where)

    all_ops = {(m.upper(), p) for p, m, _ in document.operations()}
    if checker.checked == 0:
        checker.errors.append(
            "no recorded responses in %s: the HTTP tests must run with IDEM_HTTP_RECORD_DIR "
            "set, and tests/http/client.h must record" % ", ".join(record_paths))
    for e in checker.errors:
        print(e, file=out)
    print("openapi: %d responses checked, %d operations covered" %
          (checker.checked, len(checker.operations & all_ops)), file=out)
    uncovered = sorted(all_ops - checker.operations, key=lambda o: (o[1], o[0]))
    if uncovered:
        print("openapi: operations no test reached: %s" %
              ", ".join("%s %s" % o for o in uncovered), file=out)
    pairs = {}
    for method, template, code in checker.responses:
        pairs.setdefault("%s %s" % (method, template), set()).add(code)
    for name in sorted(pairs):
        print("openapi:   %s: %s" % (name, " ".join(sorted(pairs[name]))), file=out)
    if checker.errors:
        print("openapi: %d mismatch(es) between the responses and %s" %
              (len(checker.errors), spec_path), file=out)
        return 1
    return 0


def reset(directory):
    os.makedirs(directory, exist_ok=True)
    for name in os.listdir(directory):
        if name.endswith(".jsonl"):
            os.remove(os.path.join(directory, name))
    return 0


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--spec", help="the OpenAPI document (docs/openapi.yaml)")
    parser.add_argument("--records", nargs="+", default=[],
                        help="record directories or .jsonl files")
    parser.add_argument("--reset", metavar="DIR", help="empty (and create) a record directory")
    args = parser.parse_args(argv)
    if args.reset:
        return reset(args.reset)
    if not args.spec or not args.records:
        parser.error("--spec and --records are required")
    return run(args.spec, args.records)


if __name__ == "__main__":
    sys.exit(main())
