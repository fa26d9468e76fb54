package config

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// fromFile sets f from [sidecar] when the key is present and well typed.
func (r sidecarReader) fromFile(f sidecarField) {
	v, ok := r.t.m[f.key]
	if !ok {
		return
	}
	path := r.t.keyPath(f.key)
	var err error
	switch f.kind {
	case kString:
		if s, ok := r.t.str(f.key); ok {
			*f.ptr.(*string) = s
		} else {
			return
		}
	case kBool:
		if b, ok := r.t.boolean(f.key); ok {
			*f.ptr.(*bool) = b
		} else {
			return
		}
	case kInt, kCount:
		if n, ok := r.t.integer(f.key, minOf(f.kind)); ok {
			*f.ptr.(*int) = n
		} else {
			return
		}
	case kList:
		if l, ok := r.t.strList(f.key); ok {
			*f.ptr.(*[]string) = l
		} else {
			return
		}
	case kSize:
		err = setSize(f.ptr.(*int64), v)
	case kDuration:
		s, ok := v.(string)
		if !ok {
			err = fmt.Errorf("must be a duration string such as \"5s\", not %s", typeName(v))
		} else {
			err = setDuration(f.ptr.(*time.Duration), s)
		}
	}
	if err != nil {
		r.t.errorf(path, "%v", err)
		return
	}
	r.from[f.key] = r.t.at(path)
}

// fromEnv sets f from NORA_SIDECAR_<KEY> when it is set.
func (r sidecarReader) fromEnv(f sidecarField) {
	name := envName(f.key)
	v, ok := r.e.get(name)
	if !ok {
		return
	}
	shown := v
	switch f.key {
	case "admin_token", "shared_state_password", "parent_proxy_password":
		shown = "***"
	case "shared_state":
		shown = redactSharedState(v)
	case "parent_proxy":
		shown = redactURL(v)
	}
	var err error
	switch f.kind {
	case kString:
		*f.ptr.(*string) = v
	case kBool:
		var b bool
		if b, err = parseBool(v); err == nil {
			*f.ptr.(*bool) = b
		} else {
			err = fmt.Errorf("must be true, false, 1 or 0")
		}
	case kInt, kCount:
		n, ok := r.e.integer(name, minOf(f.kind))
		if !ok {
			return // already reported
		}
		*f.ptr.(*int) = n
	case kList:
		*f.ptr.(*[]string) = splitList(v)
	case kSize:
		err = setSize(f.ptr.(*int64), v)
	case kDuration:
		err = setDuration(f.ptr.(*time.Duration), v)
	}
	if err != nil {
		r.e.probs.envf(name, shown, "%v", err)
		return
	}
	r.from[f.key] = origin{source: "env", key: name, value: shown}
}

// minOf is the least value an integer field of kind k takes.
func minOf(k fieldKind) int64 {
	if k == kCount {
		return 0
	}
	return 1
}

func setDuration(dst *time.Duration, s string) error {
	d, err := time.ParseDuration(strings.TrimSpace(s))
	if err != nil {
		return fmt.Errorf("not a duration such as \"5s\" or \"2m\"")
	}
	if d <= 0 {
		return fmt.Errorf("must be > 0 (got %s)", d)
	}
	*dst = d
	return nil
}

// setSize accepts a byte count as an integer or a string with an optional
// unit (KiB, MiB, GiB, TiB in powers of 1024; KB, MB, GB, TB in powers of
// 1000; K, M, G, T as the binary ones).
func setSize(dst *int64, v any) error {
	var n int64
	switch v := v.(type) {
	case int64:
		n = v
	case string:
		var err error
		if n, err = parseSize(v); err != nil {
			return err
		}
	default:
		return fmt.Errorf("must be a size in bytes, not %s", typeName(v))
	}
	if n < 1 {
		return fmt.Errorf("must be >= 1 byte (got %d)", n)
	}
	*dst = n
	return nil
}

func parseSize(s string) (int64, error) {
	s = strings.TrimSpace(s)
	i := strings.IndexFunc(s, func(r rune) bool { return r < '0' || r > '9' })
	if i < 0 {
		i = len(s)
	}
	num, unit := s[:i], strings.ToLower(strings.TrimSpace(s[i:]))
	units := map[string]int64{
		"": 1, "b": 1,
		"k": 1 << 10, "kib": 1 << 10, "kb": 1e3,
		"m": 1 << 20, "mib": 1 << 20, "mb": 1e6,
		"g": 1 << 30, "gib": 1 << 30, "gb": 1e9,
		"t": 1 << 40, "tib": 1 << 40, "tb": 1e12,
	}
	mult, ok := units[unit]
	n, err := strconv.ParseInt(num, 10, 64)
	if !ok || err != nil {
		return 0, fmt.Errorf("not a size such as 1048576 or \"64MiB\"")
	}
	if n > (1<<62)/mult {
		return 0, fmt.Errorf("size too large")
	}
	return n * mult, nil
}

// hostLists reads a table of host lists by upstream key or format, such
// as [sidecar.aliases] "<key or format>" = ["host", …], and its variable
// NORA_SIDECAR_<TABLE>="key=host|host,key2=host", which replaces it.
func (r sidecarReader) hostLists(table string, dst map[string][]string) {
	t := r.t.table(table)
	for _, k := range t.keys() {
		if hosts, ok := t.strList(k); ok {
			dst[k] = hosts
			r.from[table+"."+k] = t.at(t.keyPath(k))
		}
	}
	name := envName(table)
	v, ok := r.e.get(name)
	if !ok {
		return
	}
	clear(dst)
	for _, item := range splitList(v) {
		k, hosts, found := strings.Cut(item, "=")
		if k = strings.TrimSpace(k); !found || k == "" {
			r.e.probs.envf(name, item, "want key=host|host")
			continue
		}
		dst[k] = strings.Split(hosts, "|")
		r.from[table+"."+k] = origin{source: "env", key: name, value: item}
	}
}

// durations reads a table of durations by format, such as
// [sidecar.retry_after_max] pypi = "1s", and its variable
// NORA_SIDECAR_<TABLE>="format=1s,…", which sets the formats it names.
// Entries override what dst holds (the defaults); "0s" means no limit.
func (r sidecarReader) durations(table string, dst map[string]time.Duration) {
	set := func(k, v string, at origin) {
		var d time.Duration
		if v = strings.TrimSpace(v); v != "0" {
			var err error
			if d, err = time.ParseDuration(v); err != nil || d < 0 {
				r.e.probs.add(at.errorf("must be a duration such as \"1s\", or 0 for no limit (got %q)", v))
				return
			}
		}
		dst[k] = d
		r.from[table+"."+k] = at
	}
	t := r.t.table(table)
	for _, k := range t.keys() {
		if v, ok := t.str(k); ok {
			set(k, v, t.at(t.keyPath(k)))
		} else if n, ok := t.m[k].(int64); ok && n == 0 {
			set(k, "0", t.at(t.keyPath(k)))
		} else {
			t.errorf(t.keyPath(k), "must be a duration string such as \"1s\", or 0 for no limit")
		}
	}
	name := envName(table)
	v, ok := r.e.get(name)
	if !ok {
		return
	}
	for _, item := range splitList(v) {
		k, d, found := strings.Cut(item, "=")
		if k = strings.TrimSpace(k); !found || k == "" {
			r.e.probs.envf(name, item, "want format=duration")
			continue
		}
		set(k, d, origin{source: "env", key: name, value: item})
	}
}

// resolve reads [sidecar.resolve] "host:port" = "ip:port" and
// NORA_SIDECAR_RESOLVE="host:port=ip:port,…".
func (r sidecarReader) resolve(dst map[string]string) {
	r.stringMap("resolve", dst, "want host:port=ip:port", func(v string) string { return v })
}

// parents reads [sidecar.parents] "<key or format>" = "<parent URL or
// direct>" and NORA_SIDECAR_PARENTS="key=url,…", which replaces it. The
// environment's values are shown with their credentials hidden.
func (r sidecarReader) parents(dst map[string]string) {
	r.stringMap("parents", dst, "want key=parent-url or key=direct", redactURL)
}

// stringMap reads the sub-table name of string values into dst, then its
// environment form, NORA_SIDECAR_<NAME>="key=value,…", which replaces the
// table. show is how an environment value is shown in origins and
// problems (redactURL for one that may carry credentials).
func (r sidecarReader) stringMap(name string, dst map[string]string, usage string, show func(string) string) {
	t := r.t.table(name)
	for _, k := range t.keys() {
		if v, ok := t.str(k); ok {
			dst[k] = v
			r.from[name+"."+k] = t.at(t.keyPath(k))
		}
	}
	env := envName(name)
	v, ok := r.e.get(env)
	if !ok {
		return
	}
	clear(dst)
	for _, item := range splitList(v) {
		k, val, found := strings.Cut(item, "=")
		if k = strings.TrimSpace(k); !found || k == "" {
			r.e.probs.envf(env, show(item), "%s", usage)
			continue
		}
		dst[k] = strings.TrimSpace(val)
		r.from[name+"."+k] = origin{source: "env", key: env, value: k + "=" + show(val)}
	}
}
