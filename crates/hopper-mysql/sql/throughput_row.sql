(?, FLOOR(COALESCE(?, {now}) / {bucket}) * {bucket}, ?, ?, ?)
