package soak

import "github.com/nftproxy/nftproxy/test/tier"

// report is the run's table of figures, printed by TestMain at the end of the run.
var report tier.Figures
