package main

import "github.com/spf13/cobra"

func newBenchCmd() *cobra.Command {
	return &cobra.Command{Use: "bench", Short: "Measure a store against its raw baseline", Args: args(cobra.NoArgs),
		RunE: func(c *cobra.Command, _ []string) error { return usagef("bench: not implemented yet") }}
}
