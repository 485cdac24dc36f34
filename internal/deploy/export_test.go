package deploy

// Exported for the package's external tests.
var (
	ParseDryActivate = parseDryActivate
	SplitName        = splitName
)
