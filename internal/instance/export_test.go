package instance

// Processes lets the tests read /proc as the instance manager does.
var Processes = processes
