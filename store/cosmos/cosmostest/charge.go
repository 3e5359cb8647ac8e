package cosmostest

import "encoding/json"

// The request-unit model (see the package doc): a model with the shape of
// Azure's published costs for small items, not its formula.

// kb is the number of started kilobytes of n bytes, at least 1.
func kb(n int) float64 {
	if n <= 1024 {
		return 1
	}
	return float64((n + 1023) / 1024)
}

// readCharge is a point read: 1 RU per started KB of the item.
func readCharge(doc map[string]any) float64 {
	b, _ := json.Marshal(doc)
	return kb(len(b))
}

// writeCharge is a create, replace, upsert, patch or delete of an item of
// n bytes: 5 RU per started KB (a delete counts as 1 KB).
func writeCharge(n int) float64 { return 5 * kb(n) }

// queryCharge is a query page: 2.5 RU, plus 1 RU per started KB of the
// documents it returns.
func queryCharge(n int) float64 {
	if n == 0 {
		return 2.5
	}
	return 2.5 + kb(n)
}
