package database

// Exported for the envtest suite, which runs as package database_test.
var (
	LabelRoles = (*Reconciler).labelRoles
	LabelRole  = labelRole
)
