package api

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"trendgate/internal/httperr"
)

// RouteConfig is one operator-configured read endpoint of the upstream
// (the routes: section of the config file). Its zero value is not valid:
// Name, Path, Cost and Fresh (unless Cache is false) are required (see
// ValidateRoutes).
type RouteConfig struct {
	// Name names the route in plans, metrics and logs.
	Name string `yaml:"name"`
	// Path is the path template, the same for clients and the upstream:
	// literal segments and whole-segment parameters such as {topic}, for
	// example /api4/public/topic/{topic}/posts/v1. It must start with
	// /api4/.
	Path string `yaml:"path"`
	// Params maps each path parameter to its rule: topic, id or slug
	// (see ParamRules).
	Params map[string]string `yaml:"params"`
	// Query lists the accepted query parameters; any other is a 400.
	Query []QueryParam `yaml:"query"`
	// Methods may list GET and HEAD, the only methods a route serves
	// (HEAD as GET without the body); anything else is refused by
	// ValidateRoutes, so a method that changes state can never be
	// configured or forwarded.
	Methods []string `yaml:"methods"`
	// Cost is the price of one request in limiter tokens and quota units.
	Cost int `yaml:"cost"`
	// Fresh is how long an answer is served from the cache without asking
	// the upstream; Stale how long after that it may still be served
	// (capped by cache.max_stale) while it is refreshed or the upstream
	// fails. Stale 0 never serves a stale answer.
	Fresh time.Duration `yaml:"fresh"`
	Stale time.Duration `yaml:"stale"`
	// Cache false makes the route pass-through, for upstream endpoints
	// whose calls change something there (such as a GET that deletes a
	// saved search): every request is sent to the upstream on its own,
	// metered and charged like any other, and its answer is never looked
	// up in, stored in or shared through any cache tier. Fresh and Stale
	// are then left out. Nil (absent) and true cache the route.
	Cache *bool `yaml:"cache"`
	// LimitedFields is the allowlist of the fields of each "data" item a
	// key of a limited plan receives. Nil (absent) refuses such keys with
	// 403: a route without an allowlist fails closed.
	LimitedFields []string `yaml:"limited_fields"`
}

// PassThrough reports whether the route is never cached (cache: false).
func (rc *RouteConfig) PassThrough() bool { return rc.Cache != nil && !*rc.Cache }

// QueryParam is one accepted query parameter of a route and how its value
// is checked. In YAML a plain name stands for {name: <name>, type: string}.
type QueryParam struct {
	Name string `yaml:"name"`
	// Type is string (the default), integer, bool or enum.
	Type string `yaml:"type"`
	// Values are the accepted values of an enum.
	Values []string `yaml:"values"`
	// Min and Max bound an integer (nil: unbounded).
	Min *int64 `yaml:"min"`
	Max *int64 `yaml:"max"`
}

// The query parameter types.
const (
	QueryString  = "string"
	QueryInteger = "integer"
	QueryBool    = "bool"
	QueryEnum    = "enum"
)

// ParamRules are the rules a path parameter can have: topic is the rule
// of the built-in endpoints' topics; id is 1 to 20 decimal digits; slug is
// 1 to 64 letters, digits, '-' and '_' (case kept).
var ParamRules = []string{"topic", "id", "slug"}

// Route is a compiled RouteConfig: immutable, safe for concurrent use.
// Requests for it carry a pointer to it (Request.Route).
type Route struct {
	RouteConfig
	segs     []segment
	query    map[string]*QueryParam
	accepted string // the accepted parameter names, for error messages
}

// segment is one path segment of a template: a literal, or a parameter
// with its rule.
type segment struct {
	lit   string
	param string
	rule  string
}

// Routes is a compiled set of configured routes, tried most specific first
// (at the first segment where two differ, a literal beats a parameter).
// The nil *Routes has none: Parse then serves the built-in endpoints only.
type Routes struct {
	list []*Route
}

var routeNamePattern = regexp.MustCompile(`^[a-z][a-z0-9_]{0,63}$`)

// builtinTemplates are the built-in endpoints' paths under /api4/, for the
// shadowing check (the TSV path is outside /api4/, where no route can be).
var builtinTemplates = []struct {
	ep   Endpoint
	segs []segment
}{
	{EndpointList, mustSegments("/api4/public/topics/list/v1")},
	{EndpointWhatsup, mustSegments("/api4/public/topic/{topic}/whatsup/v1")},
	{EndpointSeries, mustSegments("/api4/public/topic/{topic}/time-series/v1")},
}

func mustSegments(path string) []segment {
	segs, err := parseTemplate(path)
	if err != nil {
		panic(err)
	}
	for i := range segs {
		if segs[i].param != "" {
			segs[i].rule = "topic"
		}
	}
	return segs
}

// parseTemplate splits a path template into segments.
func parseTemplate(path string) ([]segment, error) {
	rest, ok := strings.CutPrefix(path, "/api4/")
	if !ok {
		return nil, errors.New("must start with /api4/")
	}
	var segs []segment
	segs = append(segs, segment{lit: "api4"})
	for _, s := range strings.Split(rest, "/") {
		switch {
		case s == "" || s == "." || s == "..":
			return nil, errors.New("has an empty, '.' or '..' segment (or a trailing '/')")
		case strings.HasPrefix(s, "{") && strings.HasSuffix(s, "}"):
			name := s[1 : len(s)-1]
			if !routeNamePattern.MatchString(name) {
				return nil, fmt.Errorf("parameter {%s}: name must be lower-case letters, digits and '_'", name)
			}
			for _, prev := range segs {
				if prev.param == name {
					return nil, fmt.Errorf("parameter {%s} appears twice", name)
				}
			}
			segs = append(segs, segment{param: name})
		case strings.ContainsAny(s, "{}"):
			return nil, fmt.Errorf("segment %q: a parameter must be a whole segment such as {topic}", s)
		case !literalSegment(s):
			return nil, fmt.Errorf("segment %q: literal segments may hold only letters, digits, '-', '_' and '.'", s)
		default:
			segs = append(segs, segment{lit: s})
		}
	}
	return segs, nil
}

func literalSegment(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(slugByte(c) || c == '.') {
			return false
		}
	}
	return true
}

func slugByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_'
}

// ValidateRoutes reports every problem of routes at once, one per line,
// each starting with the route's place in the list ("[2].path: ...");
// nil when they are valid. It checks names (unique, not a built-in
// endpoint's), templates, parameter rules, query parameters, methods
// (GET and HEAD only), costs and lifetimes, and refuses a route that could
// match a path a built-in endpoint or another route serves.
func ValidateRoutes(routes []RouteConfig) error {
	var problems []string
	add := func(i int, field, format string, args ...any) {
		problems = append(problems, fmt.Sprintf("[%d]%s: ", i, field)+fmt.Sprintf(format, args...))
	}
	compiled := make([]*Route, len(routes))
	names := make(map[string]int)
	for i, rc := range routes {
		switch {
		case !routeNamePattern.MatchString(rc.Name):
			add(i, ".name", "must be 1 to 64 lower-case letters, digits and '_', starting with a letter")
		case isBuiltinName(rc.Name):
			add(i, ".name", "%q is a built-in endpoint", rc.Name)
		default:
			if j, dup := names[rc.Name]; dup {
				add(i, ".name", "%q is already used by routes[%d]", rc.Name, j)
			}
			names[rc.Name] = i
		}
		r, fieldErrs := compileRoute(rc)
		for _, fe := range fieldErrs {
			add(i, fe.field, "%s", fe.msg)
		}
		if r != nil && len(fieldErrs) == 0 {
			compiled[i] = r
		}
	}
	for i, r := range compiled {
		if r == nil {
			continue
		}
		for _, b := range builtinTemplates {
			if overlaps(r.segs, b.segs) {
				add(i, ".path", "shadows the built-in endpoint %s (%s)", b.ep, templateString(b.segs))
			}
		}
		for j := range i {
			if o := compiled[j]; o != nil && sameShape(r.segs, o.segs) {
				add(i, ".path", "shadows routes[%d] (%s): both match the same paths", j, o.Name)
			}
		}
	}
	if len(problems) == 0 {
		return nil
	}
	return errors.New(strings.Join(problems, "\n"))
}

func isBuiltinName(name string) bool {
	_, ok := EndpointNamed(name)
	return ok || name == EndpointRoute.String()
}

type fieldError struct{ field, msg string }

// compileRoute checks rc field by field and compiles it; the route is nil
// when the template itself is unusable.
func compileRoute(rc RouteConfig) (*Route, []fieldError) {
	var errs []fieldError
	rc.Query = slices.Clone(rc.Query) // defaults are filled in below: never in the caller's config
	problem := func(field, format string, args ...any) {
		errs = append(errs, fieldError{field, fmt.Sprintf(format, args...)})
	}
	segs, err := parseTemplate(rc.Path)
	if err != nil {
		problem(".path", "%q %v", rc.Path, err)
	}
	seen := map[string]bool{}
	for i := range segs {
		p := segs[i].param
		if p == "" {
			continue
		}
		seen[p] = true
		rule, ok := rc.Params[p]
		switch {
		case !ok:
			problem(".params", "no rule for path parameter {%s} (rules: %s)", p, strings.Join(ParamRules, ", "))
		case !slices.Contains(ParamRules, rule):
			problem(".params."+p, "unknown parameter rule %q (known: %s)", rule, strings.Join(ParamRules, ", "))
		}
		segs[i].rule = rule
	}
	for _, p := range sortedKeys(rc.Params) {
		if err == nil && !seen[p] {
			problem(".params."+p, "the path has no parameter {%s}", p)
		}
	}
	query := make(map[string]*QueryParam, len(rc.Query))
	for i := range rc.Query {
		qp := &rc.Query[i]
		field := fmt.Sprintf(".query[%d]", i)
		if msg := checkQueryParam(qp); msg != "" {
			problem(field, "%s", msg)
		}
		if query[qp.Name] != nil {
			problem(field, "%q is listed twice", qp.Name)
		}
		query[qp.Name] = qp
	}
	for i, m := range rc.Methods {
		if m != http.MethodGet && m != http.MethodHead {
			problem(fmt.Sprintf(".methods[%d]", i), "%q is not allowed: a route serves only GET and HEAD (reads); nothing that changes state is forwarded", m)
		}
	}
	if rc.Cost < 1 {
		problem(".cost", "must be at least 1 (limiter tokens and quota units per request)")
	}
	if rc.PassThrough() {
		if rc.Fresh != 0 {
			problem(".fresh", "must be left out with cache: false (the route's answers are never stored)")
		}
		if rc.Stale != 0 {
			problem(".stale", "must be left out with cache: false (the route's answers are never stored)")
		}
	} else {
		if rc.Fresh <= 0 {
			problem(".fresh", "must be a duration above 0, such as 60s (or cache: false for a route never cached)")
		}
		if rc.Stale < 0 {
			problem(".stale", "must not be negative (0 never serves a stale answer)")
		}
	}
	for i, f := range rc.LimitedFields {
		if f == "" || strings.ContainsAny(f, `"\`) {
			problem(fmt.Sprintf(".limited_fields[%d]", i), "must be a field name")
		}
	}
	if segs == nil {
		return nil, errs
	}
	names := make([]string, 0, len(rc.Query))
	for _, qp := range rc.Query {
		names = append(names, qp.Name)
	}
	slices.Sort(names)
	accepted := "no query parameters"
	if len(names) > 0 {
		accepted = strings.Join(names, ", ")
	}
	return &Route{RouteConfig: rc, segs: segs, query: query, accepted: accepted}, errs
}

// checkQueryParam returns what is wrong with qp, or "".
func checkQueryParam(qp *QueryParam) string {
	if qp.Type == "" {
		qp.Type = QueryString
	}
	switch {
	case !plainName(qp.Name):
		return "name must be 1 to 20 lower-case letters, digits and '_'"
	case keyParam(qp.Name):
		return fmt.Sprintf("%q is where clients put API keys; the gateway never accepts it", qp.Name)
	}
	switch qp.Type {
	case QueryString, QueryBool:
	case QueryInteger:
		if qp.Min != nil && qp.Max != nil && *qp.Min > *qp.Max {
			return "min is above max"
		}
		if qp.Min != nil && *qp.Min < 0 {
			return "min must not be negative (integers are plain decimal numbers without sign)"
		}
	case QueryEnum:
		if len(qp.Values) == 0 {
			return "an enum needs values"
		}
		for _, v := range qp.Values {
			if !plainValue(v) {
				return fmt.Sprintf("enum value %q: use 1 to 64 letters, digits, '-', '_' and '.'", v)
			}
		}
	default:
		return fmt.Sprintf("unknown type %q (known: string, integer, bool, enum)", qp.Type)
	}
	if (qp.Min != nil || qp.Max != nil) && qp.Type != QueryInteger {
		return "min and max apply to integers only"
	}
	if len(qp.Values) > 0 && qp.Type != QueryEnum {
		return "values apply to enums only"
	}
	return ""
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// overlaps reports whether some path matches both templates: segment by
// segment, two literals must be equal, and a literal against a parameter
// must pass the parameter's rule; two parameters can always take the same
// value.
func overlaps(a, b []segment) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := a[i], b[i]
		switch {
		case x.param == "" && y.param == "":
			if x.lit != y.lit {
				return false
			}
		case x.param == "":
			if !ruleAccepts(y.rule, x.lit) {
				return false
			}
		case y.param == "":
			if !ruleAccepts(x.rule, y.lit) {
				return false
			}
		}
	}
	return true
}

// sameShape reports whether two templates have literals and parameters in
// the same places, with the same literals: neither is more specific, so
// neither could win.
func sameShape(a, b []segment) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if (a[i].param == "") != (b[i].param == "") || a[i].lit != b[i].lit {
			return false
		}
	}
	return true
}

func ruleAccepts(rule, seg string) bool {
	_, e := applyRule(rule, seg)
	return e == nil
}

func templateString(segs []segment) string {
	var b strings.Builder
	for _, s := range segs {
		b.WriteByte('/')
		if s.param != "" {
			b.WriteString("{" + s.param + "}")
		} else {
			b.WriteString(s.lit)
		}
	}
	return b.String()
}

// NewRoutes compiles routes, which must pass ValidateRoutes.
func NewRoutes(routes []RouteConfig) (*Routes, error) {
	if err := ValidateRoutes(routes); err != nil {
		return nil, fmt.Errorf("api: routes: %w", err)
	}
	rs := &Routes{}
	for _, rc := range routes {
		r, _ := compileRoute(rc)
		rs.list = append(rs.list, r)
	}
	slices.SortStableFunc(rs.list, func(a, b *Route) int { return moreSpecific(a.segs, b.segs) })
	return rs, nil
}

// moreSpecific orders templates: -1 when a must be tried before b.
func moreSpecific(a, b []segment) int {
	for i := 0; i < len(a) && i < len(b); i++ {
		if la, lb := a[i].param == "", b[i].param == ""; la != lb {
			if la {
				return -1
			}
			return 1
		}
	}
	return 0
}

// Named returns the route called name.
func (rs *Routes) Named(name string) (*Route, bool) {
	if rs == nil {
		return nil, false
	}
	for _, r := range rs.list {
		if r.Name == name {
			return r, true
		}
	}
	return nil, false
}

// List returns the routes, most specific first. Callers must not modify it.
func (rs *Routes) List() []*Route {
	if rs == nil {
		return nil
	}
	return rs.list
}

// Parse is ParseRequest extended by the configured routes: a path that is
// not a built-in endpoint's is matched against rs, and answers ErrNotFound
// only when no route matches either. A route's request is canonical like a
// built-in's: path parameters checked by their rules and re-encoded, only
// the route's query parameters, each at most once, checked by type, and
// kept sorted by name.
func (rs *Routes) Parse(r *http.Request, now time.Time) (Request, error) {
	q, err := ParseRequest(r, now)
	if err != ErrNotFound || rs == nil || len(rs.list) == 0 || r.URL == nil {
		return q, err
	}
	path := r.URL.EscapedPath()
	if !strings.HasPrefix(path, "/api4/") {
		return Request{}, ErrNotFound
	}
	segs := strings.Split(path[1:], "/")
	for _, rt := range rs.list {
		if !rt.matches(segs) {
			continue
		}
		return rt.parse(segs, r.URL.RawQuery)
	}
	return Request{}, ErrNotFound
}

// matches reports whether segs have rt's shape: its literals in their
// places (parameters are checked by parse).
func (rt *Route) matches(segs []string) bool {
	if len(segs) != len(rt.segs) {
		return false
	}
	for i, s := range rt.segs {
		if s.param == "" && s.lit != segs[i] {
			return false
		}
	}
	return true
}

// parse builds rt's canonical request from a matching path and raw query.
func (rt *Route) parse(segs []string, rawQuery string) (Request, error) {
	q := Request{Endpoint: EndpointRoute, Route: rt}
	var path strings.Builder
	for i, s := range rt.segs {
		path.WriteByte('/')
		if s.param == "" {
			path.WriteString(s.lit)
			continue
		}
		v, e := applyRule(s.rule, segs[i])
		if e != nil {
			return Request{}, e
		}
		if s.rule == "topic" {
			if q.Topic == "" {
				q.Topic = v
			}
			v = EncodeTopic(v)
		}
		path.WriteString(v)
	}
	q.Path = path.String()
	query, e := rt.canonicalQuery(rawQuery)
	if e != nil {
		return Request{}, e
	}
	q.Query = query
	return q, nil
}

// applyRule checks a path segment against rule and returns its canonical
// (decoded) value.
func applyRule(rule, seg string) (string, *httperr.Error) {
	switch rule {
	case "topic":
		if seg == "" || seg == "." || seg == ".." {
			return "", ErrNotFound
		}
		return decodeTopic(seg)
	case "id":
		if seg == "" || len(seg) > 20 {
			return "", errParamID
		}
		for i := 0; i < len(seg); i++ {
			if seg[i] < '0' || seg[i] > '9' {
				return "", errParamID
			}
		}
		return seg, nil
	case "slug":
		if seg == "" || len(seg) > 64 {
			return "", errParamSlug
		}
		for i := 0; i < len(seg); i++ {
			if !slugByte(seg[i]) {
				return "", errParamSlug
			}
		}
		return seg, nil
	}
	return "", ErrNotFound
}

// canonicalQuery checks raw against rt's parameters and returns it in
// canonical form: each given parameter once, sorted by name, its value
// normalized by type and query-escaped.
func (rt *Route) canonicalQuery(raw string) (string, *httperr.Error) {
	if raw == "" {
		return "", nil
	}
	vals, err := url.ParseQuery(raw)
	if err != nil {
		return "", errQuery
	}
	names := make([]string, 0, len(vals))
	for name := range vals {
		if keyParam(name) {
			return "", errKeyInQuery
		}
		names = append(names, name)
	}
	slices.Sort(names) // a fixed order: the first problem reported never depends on map order
	out := url.Values{}
	for _, name := range names {
		qp := rt.query[name]
		if qp == nil {
			msg := "unknown query parameter; this endpoint accepts " + rt.accepted
			if plainName(name) {
				msg = "unknown query parameter " + strconv.Quote(name) + "; this endpoint accepts " + rt.accepted
			}
			return "", bad(CodeUnknownParameter, msg)
		}
		if len(vals[name]) > 1 {
			return "", bad(CodeDuplicateParameter, name+" is given more than once; give each parameter at most once")
		}
		v, e := qp.canonical(vals[name][0])
		if e != nil {
			return "", e
		}
		out.Set(name, v)
	}
	return out.Encode(), nil
}

// canonical checks one value of qp and returns its canonical form.
func (qp *QueryParam) canonical(v string) (string, *httperr.Error) {
	// One code for every configured parameter: the set of codes stays the
	// documented one whatever the routes; the message names the parameter.
	invalid := func(what string) *httperr.Error {
		return bad(CodeInvalidParameter, qp.Name+" must be "+what)
	}
	if v == "" {
		return "", invalid("given a value; omit it instead of leaving it empty")
	}
	switch qp.Type {
	case QueryInteger:
		n, ok := parsePlainInt(v)
		switch {
		case !ok:
			return "", invalid("a plain decimal number: no sign, leading zeros, decimals or exponent")
		case qp.Min != nil && n < *qp.Min, qp.Max != nil && n > *qp.Max:
			return "", invalid("between " + boundText(qp.Min, "0") + " and " + boundText(qp.Max, "any size"))
		}
		return v, nil
	case QueryBool:
		if v != "true" && v != "false" {
			return "", invalid("true or false")
		}
		return v, nil
	case QueryEnum:
		if !slices.Contains(qp.Values, v) {
			return "", invalid("one of " + strings.Join(qp.Values, ", "))
		}
		return v, nil
	}
	if len(v) > 128 || !plainText(v) {
		return "", invalid("1 to 128 letters, digits, spaces or the characters - _ . , : # $")
	}
	return v, nil
}

func boundText(b *int64, none string) string {
	if b == nil {
		return none
	}
	return strconv.FormatInt(*b, 10)
}

// parsePlainInt parses "0" or a decimal number without sign or leading
// zeros, of at most 18 digits.
func parsePlainInt(s string) (int64, bool) {
	if s == "" || len(s) > 18 || (s[0] == '0' && len(s) > 1) {
		return 0, false
	}
	var n int64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}

// plainValue reports whether an enum value is 1 to 64 letters, digits,
// '-', '_' and '.'.
func plainValue(v string) bool {
	return v != "" && len(v) <= 64 && literalSegment(v)
}

// plainText reports whether a string parameter's value holds only
// letters, digits, space and - _ . , : # $.
func plainText(v string) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; !(slugByte(c) || strings.IndexByte(" .,:#$", c) >= 0) {
			return false
		}
	}
	return true
}

// UnmarshalYAML reads a query parameter either as a plain name, which
// accepts any plain text value (type string), or as a mapping of its
// fields; a field it does not know is an error, as everywhere in the
// config file.
func (qp *QueryParam) UnmarshalYAML(node *yaml.Node) error {
	if node.Kind == yaml.ScalarNode {
		*qp = QueryParam{Name: node.Value, Type: QueryString}
		return nil
	}
	if node.Kind != yaml.MappingNode {
		return fmt.Errorf("a query parameter is a name or a mapping with name, type, values, min, max (line %d)", node.Line)
	}
	for i := 0; i+1 < len(node.Content); i += 2 {
		switch k := node.Content[i]; k.Value {
		case "name", "type", "values", "min", "max":
		default:
			return fmt.Errorf("line %d: field %s not found in type api.QueryParam", k.Line, k.Value)
		}
	}
	type plain QueryParam // without this method
	var p plain
	if err := node.Decode(&p); err != nil {
		return err
	}
	*qp = QueryParam(p)
	return nil
}

// ParseKey is api.ParseKey extended by the configured routes: a route's
// key ("v2|route|<name>|<path>|<query>") is accepted only when a route of
// that name exists and parses the request the key names back to the same
// key, so an entry is never served under a route that changed. Other keys
// go to ParseKey.
func (rs *Routes) ParseKey(key string, now time.Time) (Request, error) {
	rest, ok := strings.CutPrefix(key, keyVersion+"route|")
	if !ok {
		return ParseKey(key, now)
	}
	f := strings.Split(rest, "|")
	if len(f) != 3 {
		return Request{}, fmt.Errorf("%w: %q", ErrNotCanonicalKey, key)
	}
	if _, found := rs.Named(f[0]); !found || !strings.HasPrefix(f[1], "/") {
		return Request{}, fmt.Errorf("%w: %q: no such route", ErrNotCanonicalKey, key)
	}
	target := f[1]
	if f[2] != "" {
		target += "?" + f[2]
	}
	u, err := url.ParseRequestURI(target)
	if err != nil {
		return Request{}, fmt.Errorf("%w: %q", ErrNotCanonicalKey, key)
	}
	q, err := rs.Parse(&http.Request{Method: http.MethodGet, URL: u, RequestURI: target}, now)
	if err != nil {
		return Request{}, fmt.Errorf("%w: %q: %w", ErrNotCanonicalKey, key, err)
	}
	if q.Key() != key {
		return Request{}, fmt.Errorf("%w: %q parses back as %q", ErrNotCanonicalKey, key, q.Key())
	}
	return q, nil
}
