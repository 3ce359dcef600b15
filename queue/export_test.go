package queue

// Figure is figure (helpers_test.go) for the tests of package queue_test.
var Figure = figure
