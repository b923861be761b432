package replicate

// Helpers of the package's own tests, for its external tests too.
var (
	ServeBackup       = serveBackup
	StoreWithOneBatch = storeWithOneBatch
)
