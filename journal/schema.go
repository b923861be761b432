package journal

import (
	"fmt"
	"slices"
)

// The metadata schema: every value a journal holds under "m/", its type
// and who writes it, in one place. Callers name a value by its MetaKey's
// Name (Store.Meta and friends refuse a name the schema lacks), and
// docs/FORMAT.md §6.2 lists exactly these keys (a test checks both).

// MetaType is how a metadata value is encoded.
type MetaType string

// Metadata value types.
const (
	MetaUint  MetaType = "uint64"       // 8 bytes, big-endian
	MetaText  MetaType = "text"         // ASCII
	MetaBytes MetaType = "bytes"        // a fixed layout, FORMAT.md says which
	MetaJSON  MetaType = "json"         // a JSON document
	MetaFlag  MetaType = "flag"         // present or not; its value says nothing more
	MetaOld   MetaType = "old (uint64)" // read only to migrate older journals
)

// MetaKey is one metadata value: "m/" + Name.
type MetaKey struct {
	Name   string
	Type   MetaType
	Writer string // the package that writes it, and for which role
}

// Every metadata key.
var (
	KeyMetaVersion   = MetaKey{"metaversion", MetaUint, "journal"}
	KeyEpoch         = MetaKey{"epoch", MetaUint, "journal"}
	KeyVolume        = MetaKey{"volume", MetaText, "mount (a primary's first start); replicate (a backup adopts its primary's)"}
	KeyOpen          = MetaKey{"open", MetaUint, "journal, for mount"}
	KeyClosed        = MetaKey{"closed", MetaUint, "journal, for mount"}
	KeyBatchLog      = MetaKey{"batchlog", MetaFlag, "journal"}
	KeyRole          = MetaKey{"role", MetaText, "mount (primary); replicate (backup)"}
	KeyAhead         = MetaKey{"ahead", MetaUint, "mount (primary)"}
	KeyAcked         = MetaKey{"acked", MetaUint, "mount (primary)"}
	KeyBoot          = MetaKey{"boot", MetaText, "mount (primary)"}
	KeyLocalSync     = MetaKey{"localsync", MetaText, "mount (primary)"}
	KeyLocalRules    = MetaKey{"localrules", MetaJSON, "mount (primary)"}
	KeyFingerprint   = MetaKey{"fingerprint", MetaBytes, "mount (primary)"}
	KeyFormerPrimary = MetaKey{"formerprimary", MetaUint, "replicate (a deposed primary's journal, as a backup's)"}
	KeyFenced        = MetaKey{"fenced", MetaUint, "replicate (backup)"}
	KeyStalled       = MetaKey{"stalled", MetaUint, "replicate (backup)"}
	KeyAckPolicy     = MetaKey{"ackpolicy", MetaBytes, "replicate (backup)"}
	KeyResyncing     = MetaKey{"resyncing", MetaUint, "replicate (backup)"}
	KeyFirstResync   = MetaKey{"first-resync", MetaText, "replicate (backup)"}
	KeyPromoted      = MetaKey{"promoted", MetaJSON, "replicate (a promoted backup)"}
	KeyApplying      = MetaKey{"applying", MetaOld, "none: a backup journal made before apply.progress"}
	KeyApplied       = MetaKey{"applied", MetaOld, "none: a backup journal made before apply.progress"}
)

// KeyRole's values: what the journal last served. A backup that opens a
// journal a primary used waits for a resync first.
const (
	RolePrimary = "primary"
	RoleBackup  = "backup"
)

// MetaKeys is the whole schema, in docs/FORMAT.md's order.
var MetaKeys = []MetaKey{
	KeyMetaVersion, KeyEpoch, KeyVolume, KeyOpen, KeyClosed, KeyBatchLog, KeyRole, KeyAhead, KeyAcked,
	KeyBoot, KeyLocalSync, KeyLocalRules, KeyFingerprint, KeyFormerPrimary, KeyFenced, KeyStalled,
	KeyAckPolicy, KeyResyncing, KeyFirstResync, KeyPromoted, KeyApplying, KeyApplied,
}

// checkName refuses a metadata name the schema lacks: a value no reader
// knows of, or a typo that would read as unset.
func checkName(name string) error {
	if slices.ContainsFunc(MetaKeys, func(k MetaKey) bool { return k.Name == name }) {
		return nil
	}
	return fmt.Errorf("metadata key %q is not in the schema (journal/schema.go)", name)
}
