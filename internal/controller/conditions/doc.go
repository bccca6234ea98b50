// Package conditions builds the metav1.Conditions daytwo reports, so every kind
// sets ObservedGeneration and a stable reason the same way.
package conditions
