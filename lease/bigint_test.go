package lease

import "math/big"

type bigInt = big.Int

func newBig(v int64) *big.Int { return big.NewInt(v) }
