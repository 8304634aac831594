"""Gobang for two players on a text board (a reference solution for the Flow task set's acceptance)."""

import sys

SIZE = 15


def new_board(size=SIZE):
    return [["."] * size for _ in range(size)]


def place(board, row, col, player):
    if not (0 <= row < len(board) and 0 <= col < len(board)) or board[row][col] != ".":
        return False
    board[row][col] = player
    return True


def winner(board):
    n = len(board)
    for r in range(n):
        for c in range(n):
            p = board[r][c]
            if p == ".":
                continue
            for dr, dc in ((0, 1), (1, 0), (1, 1), (1, -1)):
                k = 1
                while k < 5 and 0 <= r + dr * k < n and 0 <= c + dc * k < n and board[r + dr * k][c + dc * k] == p:
                    k += 1
                if k == 5:
                    return p
    return None


def main():
    board, player = new_board(), "X"
    for line in sys.stdin:
        parts = line.split()
        if len(parts) != 2 or not all(x.lstrip("-").isdigit() for x in parts):
            print("enter: row col")
            continue
        if not place(board, int(parts[0]), int(parts[1]), player):
            print("illegal move")
            continue
        print("\n".join(" ".join(r) for r in board))
        if winner(board):
            print(f"{player} wins")
            return
        player = "O" if player == "X" else "X"


if __name__ == "__main__":
    main()
