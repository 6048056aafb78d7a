package node

// Left is how many bytes of the file the node still lacks: 0 once it has
// every piece. Transports that announce on its behalf (package rtcpeer)
// read it.
func (n *Node) Left() int64 {
	have := n.have()
	var left int64
	for i := range n.m.NumPieces() {
		if !have.Has(i) {
			left += n.m.PieceLen(i)
		}
	}
	return left
}
