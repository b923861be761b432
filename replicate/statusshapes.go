package replicate

import "github.com/pbfs/pbfs/internal/status"

// The shapes replicate reports moved to package status; these names stay
// until their users name that package's.

type (
	BackupStatus   = status.Backup
	ResyncProgress = status.ResyncProgress
	BackupManifest = status.BackupManifest
)
