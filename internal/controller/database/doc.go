// Package database reconciles Databases: the StatefulSet of PostgreSQL pods
// run by the daytwo instance manager, its Services, Secret and configuration.
package database
