//go:build !race

package coralcaddy

// raceEnabled: built with -race.
const raceEnabled = false
