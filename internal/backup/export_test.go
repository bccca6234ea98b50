package backup

// The statement splitter and role reader, for their unit test.
var (
	SplitStatements = splitStatements
	RoleStatement   = roleStatement
)
