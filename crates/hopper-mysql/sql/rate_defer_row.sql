-- One job held back and its new time, typed so that the first values prepared do not set
-- the columns' types.
SELECT CAST(? AS SIGNED) AS id, CAST(? AS SIGNED) AS at
