"""Views: hpq's results drawn for people (``hpq report``: one self-contained HTML page).

``load`` reads and checks result JSON (untrusted input, bounded), ``svg`` draws charts as plain SVG text,
``page`` lays out the page. Nothing here needs the network, a browser or JavaScript to be seen: the page's
CSS and SVG are inline, so the file can be mailed, attached to a ticket or opened from a laptop offline.
"""
