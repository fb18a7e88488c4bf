"""A real OTLP/HTTP receiver for the tests: POST /v1/traces and /v1/metrics, JSON encoding.

Each request is decoded by the OTLP schema (opentelemetry-proto's ExportTraceServiceRequest
and ExportMetricsServiceRequest,
through the protocol's JSON mapping: lowerCamelCase fields, trace and span ids as hex,
64-bit integers as decimal strings, enums as numbers, an AnyValue holding exactly one of its
kinds). A field the schema does not have, or a value of the wrong type, makes the request
malformed: it is answered 400 and kept in `errors`, and the test that sent it fails. Nothing
is found by searching the body's text.

The receiver can be told to fail: `answer = 503` (every POST refused), or stopped and
started again on the same port (a collector that is down).
"""

from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Iterator, Union

AttributeValue = Union[str, int, bool, float, list[Any], dict[str, Any], bytes]

SPAN_KINDS = {0: "unspecified", 1: "internal", 2: "server", 3: "client", 4: "producer", 5: "consumer"}
STATUS_CODES = {0: "unset", 1: "ok", 2: "error"}

_HEX32 = re.compile(r"[0-9a-f]{32}\Z")
_HEX16 = re.compile(r"[0-9a-f]{16}\Z")
_UINT = re.compile(r"[0-9]+\Z")
_INT = re.compile(r"-?[0-9]+\Z")


class Malformed(ValueError):
    """The request does not follow the OTLP schema."""


def _object(value: Any, where: str, allowed: set[str]) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise Malformed(f"{where}: not an object")
    unknown = set(value) - allowed
    if unknown:
        raise Malformed(f"{where}: fields the schema does not have: {sorted(unknown)}")
    return value


def _array(value: Any, where: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise Malformed(f"{where}: not an array")
    return value


def _string(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise Malformed(f"{where}: not a string")
    return value


def _fixed64(value: Any, where: str) -> int:
    """A fixed64/uint64 field: a decimal string (a JSON number is accepted by the mapping too)."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    if isinstance(value, str) and _UINT.match(value):
        return int(value)
    raise Malformed(f"{where}: not a uint64")


def _enum(value: Any, where: str, known: dict[int, str]) -> str:
    if isinstance(value, bool) or not isinstance(value, int) or value not in known:
        raise Malformed(f"{where}: not one of the enum's numbers {sorted(known)}")
    return known[value]


def any_value(value: Any, where: str) -> AttributeValue:
    v = _object(value, where, {"stringValue", "boolValue", "intValue", "doubleValue", "arrayValue", "kvlistValue",
                               "bytesValue"})
    if len(v) != 1:
        raise Malformed(f"{where}: an AnyValue holds exactly one value, not {sorted(v)}")
    kind, inner = next(iter(v.items()))
    if kind == "stringValue":
        return _string(inner, where)
    if kind == "boolValue":
        if not isinstance(inner, bool):
            raise Malformed(f"{where}: boolValue not a boolean")
        return inner
    if kind == "intValue":
        # int64: a decimal string in the JSON mapping (a number would lose digits past 2^53).
        if not isinstance(inner, str) or not _INT.match(inner):
            raise Malformed(f"{where}: intValue not an int64 as a decimal string")
        return int(inner)
    if kind == "doubleValue":
        if isinstance(inner, bool) or not isinstance(inner, (int, float)):
            raise Malformed(f"{where}: doubleValue not a number")
        return float(inner)
    if kind == "arrayValue":
        arr = _object(inner, where, {"values"})
        return [any_value(x, f"{where}.values[{i}]") for i, x in enumerate(_array(arr.get("values"), where))]
    if kind == "kvlistValue":
        return attributes(_object(inner, where, {"values"}).get("values"), where)
    return bytes(_string(inner, where), "ascii")


def attributes(value: Any, where: str) -> dict[str, AttributeValue]:
    out: dict[str, AttributeValue] = {}
    for i, kv in enumerate(_array(value, where)):
        item = _object(kv, f"{where}[{i}]", {"key", "value"})
        key = _string(item.get("key"), f"{where}[{i}].key")
        if key in out:
            raise Malformed(f"{where}: attribute {key!r} twice")
        out[key] = any_value(item.get("value"), f"{where}[{i}].value")
    return out


@dataclass
class Event:
    name: str
    time_ns: int
    attributes: dict[str, AttributeValue]


@dataclass
class Span:
    trace_id: str
    span_id: str
    parent_span_id: str | None
    name: str
    kind: str
    start_ns: int
    end_ns: int
    attributes: dict[str, AttributeValue]
    events: list[Event]
    status: str
    status_message: str
    resource: dict[str, AttributeValue]
    scope: str

    def attr(self, key: str) -> AttributeValue | None:
        return self.attributes.get(key)


def _span(value: Any, where: str, resource: dict[str, AttributeValue], scope: str) -> Span:
    s = _object(value, where, {"traceId", "spanId", "traceState", "parentSpanId", "flags", "name", "kind",
                               "startTimeUnixNano", "endTimeUnixNano", "attributes", "droppedAttributesCount",
                               "events", "droppedEventsCount", "links", "droppedLinksCount", "status"})
    trace_id = _string(s.get("traceId"), f"{where}.traceId")
    span_id = _string(s.get("spanId"), f"{where}.spanId")
    if not _HEX32.match(trace_id) or trace_id == "0" * 32:
        raise Malformed(f"{where}.traceId: not 16 bytes of lower-case hex, or all zero")
    if not _HEX16.match(span_id) or span_id == "0" * 16:
        raise Malformed(f"{where}.spanId: not 8 bytes of lower-case hex, or all zero")
    parent = s.get("parentSpanId")
    if parent in (None, ""):
        parent = None
    elif not isinstance(parent, str) or not _HEX16.match(parent):
        raise Malformed(f"{where}.parentSpanId: not 8 bytes of hex")
    events = []
    for i, e in enumerate(_array(s.get("events"), f"{where}.events")):
        ev = _object(e, f"{where}.events[{i}]", {"timeUnixNano", "name", "attributes", "droppedAttributesCount"})
        events.append(Event(_string(ev.get("name"), f"{where}.events[{i}].name"),
                            _fixed64(ev.get("timeUnixNano"), f"{where}.events[{i}].timeUnixNano"),
                            attributes(ev.get("attributes"), f"{where}.events[{i}].attributes")))
    status = _object(s.get("status", {}), f"{where}.status", {"message", "code"})
    start, end = _fixed64(s.get("startTimeUnixNano"), f"{where}.startTimeUnixNano"), _fixed64(
        s.get("endTimeUnixNano"), f"{where}.endTimeUnixNano")
    if end < start:
        raise Malformed(f"{where}: ends before it starts")
    return Span(trace_id=trace_id, span_id=span_id, parent_span_id=parent,
                name=_string(s.get("name"), f"{where}.name"), kind=_enum(s.get("kind", 0), f"{where}.kind", SPAN_KINDS),
                start_ns=start, end_ns=end, attributes=attributes(s.get("attributes"), f"{where}.attributes"),
                events=events, status=_enum(status.get("code", 0), f"{where}.status.code", STATUS_CODES),
                status_message=_string(status.get("message", ""), f"{where}.status.message"),
                resource=resource, scope=scope)


def _scoped(body: bytes, signal: str, items: str) -> Iterator[tuple[dict[str, AttributeValue], str, Any, str]]:
    """Walks an Export<Signal>ServiceRequest: resource<Signal>[] of scope<Signal>[] of `items`[],
    checking every level; yields each item with its resource's attributes, its scope's name
    and where it stands (for messages)."""
    try:
        request = json.loads(body)
    except ValueError as e:
        raise Malformed(f"not JSON: {e}") from None
    top = _object(request, "request", {f"resource{signal}"})
    for i, rs in enumerate(_array(top.get(f"resource{signal}"), f"resource{signal}")):
        where = f"resource{signal}[{i}]"
        r = _object(rs, where, {"resource", f"scope{signal}", "schemaUrl"})
        res = _object(r.get("resource", {}), f"{where}.resource", {"attributes", "droppedAttributesCount"})
        resource = attributes(res.get("attributes"), f"{where}.resource.attributes")
        for j, ss in enumerate(_array(r.get(f"scope{signal}"), f"{where}.scope{signal}")):
            w = f"{where}.scope{signal}[{j}]"
            sc = _object(ss, w, {"scope", items, "schemaUrl"})
            scope = _object(sc.get("scope", {}), f"{w}.scope", {"name", "version", "attributes",
                                                                "droppedAttributesCount"})
            name = _string(scope.get("name", ""), f"{w}.scope.name")
            for k, item in enumerate(_array(sc.get(items), w)):
                yield resource, name, item, f"{w}.{items}[{k}]"


def decode_export_request(body: bytes) -> list[Span]:
    """The spans of an ExportTraceServiceRequest in the OTLP/JSON encoding; Malformed otherwise."""
    return [_span(s, where, resource, scope) for resource, scope, s, where in _scoped(body, "Spans", "spans")]


@dataclass
class Point:
    attributes: dict[str, AttributeValue]
    start_ns: int
    time_ns: int
    value: int | float | None = None  # a sum's
    count: int | None = None          # a histogram's
    sum: float | None = None
    bucket_counts: list[int] = field(default_factory=list)
    bounds: list[float] = field(default_factory=list)


@dataclass
class Metric:
    name: str
    unit: str
    kind: str  # "sum" or "histogram"
    monotonic: bool
    temporality: str
    points: list[Point]
    resource: dict[str, AttributeValue]


TEMPORALITIES = {0: "unspecified", 1: "delta", 2: "cumulative"}


def _double(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise Malformed(f"{where}: not a double")
    return float(value)


def _point(value: Any, where: str, histogram: bool) -> Point:
    common = {"attributes", "startTimeUnixNano", "timeUnixNano", "exemplars", "flags"}
    p = _object(value, where, common | ({"count", "sum", "bucketCounts", "explicitBounds", "min", "max"} if histogram
                                        else {"asInt", "asDouble"}))
    point = Point(attributes(p.get("attributes"), f"{where}.attributes"),
                  _fixed64(p.get("startTimeUnixNano"), f"{where}.startTimeUnixNano"),
                  _fixed64(p.get("timeUnixNano"), f"{where}.timeUnixNano"))
    if histogram:
        point.count = _fixed64(p.get("count"), f"{where}.count")
        point.sum = _double(p.get("sum", 0), f"{where}.sum")
        point.bucket_counts = [_fixed64(c, f"{where}.bucketCounts") for c in _array(p.get("bucketCounts"), where)]
        point.bounds = [_double(b, f"{where}.explicitBounds") for b in _array(p.get("explicitBounds"), where)]
        if point.bucket_counts and len(point.bucket_counts) != len(point.bounds) + 1:
            raise Malformed(f"{where}: bucketCounts must be one longer than explicitBounds")
        if sum(point.bucket_counts) != point.count:
            raise Malformed(f"{where}: the buckets do not add up to the count")
    elif ("asInt" in p) == ("asDouble" in p):
        raise Malformed(f"{where}: a NumberDataPoint holds exactly one of asInt and asDouble")
    elif "asInt" in p:
        if not isinstance(p["asInt"], str) or not _INT.match(p["asInt"]):
            raise Malformed(f"{where}.asInt: not an int64 as a decimal string")
        point.value = int(p["asInt"])
    else:
        point.value = _double(p["asDouble"], f"{where}.asDouble")
    return point


def decode_metrics_request(body: bytes) -> list[Metric]:
    """The metrics of an ExportMetricsServiceRequest in the OTLP/JSON encoding; Malformed otherwise.
    Sums and histograms only: oncely exports nothing else."""
    metrics: list[Metric] = []
    for resource, _, m, mw in _scoped(body, "Metrics", "metrics"):
        metric = _object(m, mw, {"name", "description", "unit", "sum", "histogram", "metadata"})
        kinds = [kind for kind in ("sum", "histogram") if kind in metric]
        if len(kinds) != 1:
            raise Malformed(f"{mw}: a metric holds exactly one kind of data")
        kind = kinds[0]
        data = _object(metric[kind], f"{mw}.{kind}",
                       {"dataPoints", "aggregationTemporality"} | ({"isMonotonic"} if kind == "sum" else set()))
        monotonic = data.get("isMonotonic", False)
        if not isinstance(monotonic, bool):
            raise Malformed(f"{mw}.sum.isMonotonic: not a boolean")
        metrics.append(Metric(
            name=_string(metric.get("name"), f"{mw}.name"), unit=_string(metric.get("unit", ""), f"{mw}.unit"),
            kind=kind, monotonic=monotonic,
            temporality=_enum(data.get("aggregationTemporality", 0), f"{mw}.aggregationTemporality",
                              TEMPORALITIES),
            points=[_point(p, f"{mw}.{kind}.dataPoints[{n}]", kind == "histogram")
                    for n, p in enumerate(_array(data.get("dataPoints"), mw))],
            resource=resource))
    return metrics


@dataclass
class Receiver:
    """Listens on 127.0.0.1 (port 0: any free one) and keeps every span it accepted."""

    port: int = 0
    answer: int = 200
    spans: list[Span] = field(default_factory=list)
    metric_exports: list[list[Metric]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    requests: int = 0

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self.start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                with receiver._lock:
                    receiver.requests += 1
                    receiver.headers.append({k.lower(): v for k, v in self.headers.items()})
                    answer = receiver.answer
                if self.path not in ("/v1/traces", "/v1/metrics"):
                    answer = 404
                elif answer == 200:
                    if self.headers.get("Content-Type") != "application/json":
                        answer = 415
                    else:
                        try:
                            if self.path == "/v1/traces":
                                spans = decode_export_request(body)
                                with receiver._lock:
                                    receiver.spans.extend(spans)
                            else:
                                metrics = decode_metrics_request(body)
                                with receiver._lock:
                                    receiver.metric_exports.append(metrics)
                        except Malformed as e:
                            with receiver._lock:
                                receiver.errors.append(str(e))
                            answer = 400
                self.send_response(answer)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(b"{}")

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.port = self._server.server_address[1]
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        """Down: the port refuses connections until start()."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def latest_metrics(self) -> list[Metric]:
        """The metrics of the last export (cumulative: each holds everything so far)."""
        with self._lock:
            if self.errors:
                raise AssertionError(f"the receiver got malformed OTLP: {self.errors[0]}")
            return self.metric_exports[-1] if self.metric_exports else []

    def taken(self, where: Callable[[Span], bool] = lambda s: True) -> list[Span]:
        with self._lock:
            if self.errors:
                raise AssertionError(f"the receiver got malformed OTLP: {self.errors[0]}")
            return [s for s in self.spans if where(s)]
