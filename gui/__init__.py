"""The trackscope desktop app (PySide6 + pyqtgraph). The engine never imports this package."""
