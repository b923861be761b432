package manifest

import (
	"encoding/json"
	"unicode/utf8"
)

// A path or symlink target may hold any bytes but NUL ('/' aside), and
// encoding/json would replace the ones that are not UTF-8 with U+FFFD: a
// name in Latin-1 came back from the control socket as another name.
// Such a path or target travels base64-encoded in path_b64 or target_b64
// instead (and "path" is left empty); a valid one as a plain string.

type entryFields Entry // Entry without its JSON methods

type entryJSON struct {
	entryFields
	PathB64   []byte `json:"path_b64,omitempty"`
	TargetB64 []byte `json:"target_b64,omitempty"`
}

// MarshalJSON encodes e, with a path or target that is not UTF-8 in
// base64.
func (e Entry) MarshalJSON() ([]byte, error) {
	j := entryJSON{entryFields: entryFields(e)}
	if !utf8.ValidString(e.Path) {
		j.Path, j.PathB64 = "", []byte(e.Path)
	}
	if !utf8.ValidString(e.Target) {
		j.Target, j.TargetB64 = "", []byte(e.Target)
	}
	return json.Marshal(j)
}

// UnmarshalJSON decodes what MarshalJSON encodes.
func (e *Entry) UnmarshalJSON(b []byte) error {
	var j entryJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*e = Entry(j.entryFields)
	if j.PathB64 != nil {
		e.Path = string(j.PathB64)
	}
	if j.TargetB64 != nil {
		e.Target = string(j.TargetB64)
	}
	return nil
}

// Rekey indexes entries decoded from JSON by their own paths: a JSON
// object's keys cannot hold a path that is not UTF-8.
func Rekey(m map[string]Entry) map[string]Entry {
	if m == nil {
		return nil
	}
	out := make(map[string]Entry, len(m))
	for _, e := range m {
		out[e.Path] = e
	}
	return out
}

// SplitUTF8 splits paths into those JSON carries as strings and the rest.
func SplitUTF8(paths []string) (valid []string, other [][]byte) {
	for _, p := range paths {
		if utf8.ValidString(p) {
			valid = append(valid, p)
		} else {
			other = append(other, []byte(p))
		}
	}
	return valid, other
}
